"""Resumable federated ABCDP runs, the coordinator's side without daemons: its run state (candidate queue,
public generator, counters) round-trips through its JSON bit for bit and refuses a damaged one. The runs over
daemon processes are tests/network/test_resume_abcdp.py, whose plan and hand driver this borrows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.network.test_resume_abcdp import BATCH, Driver, make_plan


def test_coordinator_state_round_trips_bit_for_bit() -> None:
    from coordinator.abcdp import AbcdpState

    plan = make_plan()
    drv = Driver.new(plan)
    for bits in ([False] * BATCH, [False, True] + [False] * (BATCH - 2)):
        drv.batch()
        drv.queue.settle(np.array(bits))
    st = AbcdpState(drv.queue, dict(drv.rng.bit_generator.state), 2, 2 * BATCH)
    doc = json.loads(json.dumps(st.to_json()))
    again = AbcdpState.from_json(plan, doc)
    assert (again.steps, again.sent, again.rng_state) == (2, 2 * BATCH, st.rng_state)
    for k, v in again.queue.export().items():
        w = drv.queue.export()[k]
        if isinstance(v, np.ndarray):
            assert (v.tobytes(), v.dtype, v.shape) == (w.tobytes(), w.dtype, w.shape), k
        else:
            assert v == w, k
    a, b = Driver(plan, again.queue, np.random.default_rng()), drv.copy()
    a.rng.bit_generator.state = again.rng_state
    np.testing.assert_array_equal(a.batch(), b.batch())  # the same next candidates
    for bad, what in [
        ({**doc, "rng_state": {"bit_generator": "MT19937"}}, "not a PCG64 generator state"),
        ({**doc, "steps": -1}, "steps -1"),
        ({k: v for k, v in doc.items() if k != "queue"}, "missing or malformed"),
        ({**doc, "queue": {**doc["queue"], "count": 3}}, "inconsistent"),
        ({**doc, "queue": {**doc["queue"], "ids": {"dtype": "<f4", "shape": [0], "data": ""}}}, "dtype"),
    ]:
        with pytest.raises(ValueError, match=what):
            AbcdpState.from_json(plan, bad)
