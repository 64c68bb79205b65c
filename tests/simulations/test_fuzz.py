"""The structure-aware mutator of the descriptor-driven fuzz (simulations/fuzz.py); the fuzz itself runs
against daemon processes in tests/network/test_fuzz.py."""

from __future__ import annotations

import random

import numpy as np
from google.protobuf.message import DecodeError

from proto import party_pb2, serde
from simulations.fuzz import Mutator


def test_mutator_reaches_nested_repeated_and_map_fields() -> None:
    """The structure-aware mutator changes fields inside nested messages, repeated fields and maps."""
    rnd = random.Random(3)
    mut = Mutator(rnd)
    seed = party_pb2.EvaluateRequest(
        session_id=b"s" * 16, step=1, batch=4, inputs=serde.inputs_to_proto({"theta": np.zeros(4)})
    )
    changed_inputs = changed_step = 0
    for _ in range(300):
        kind, blob = mut.variant(seed)
        if kind != "fields":
            continue
        try:
            msg = party_pb2.EvaluateRequest.FromString(blob)
        except DecodeError:  # a mutation may not parse back (e.g. invalid UTF-8)
            continue
        changed_inputs += msg.inputs != seed.inputs
        changed_step += msg.step != seed.step
    assert changed_inputs > 10 and changed_step > 10
