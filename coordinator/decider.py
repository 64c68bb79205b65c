"""A sampler's decider over the party network: each request is one ``Evaluate`` step of an open session.

    with BlockingCoordinator(endpoints, tls) as coord:
        sess = coord.open_session(reveal_mode="sign", model="bayes-logistic", model_params={...})
        kernel = RandomWalkMH(model, NetworkDecider(sess), cov)      # mechanisms.samplers

The kernel builds the same public :class:`~mechanisms.samplers.requests.DecisionRequest` it would give an
in-memory decider; the parties compute their terms with the same code (``parties/models_bridge.py``). The
session's ``model_params`` fix the kind (mh / rejection) and the penalty; the request must agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from coordinator.api import BlockingSession
from mechanisms.samplers.requests import DecisionRequest


@dataclass
class NetworkDecider:
    session: BlockingSession
    calls: int = 0
    decisions: int = 0
    rounds: int = 0

    def __call__(self, request: DecisionRequest) -> npt.NDArray[np.bool_]:
        kind = self.session.spec.model_params.get("kind", "mh")
        if request.kind != kind:
            raise ValueError(f"this session decides {kind!r} requests, got {request.kind!r}")
        if (request.penalty is None) != (self.session.spec.model_params.get("penalty") is None):
            raise ValueError("the request's penalty and the session's model_params.penalty disagree")
        inputs: dict[str, npt.ArrayLike] = dict(request.to_inputs())
        d = self.session.evaluate(inputs, request.n)
        self.calls += 1
        self.decisions += request.n
        tr = self.session.session.last_transcript
        if tr is not None:
            self.rounds += tr.rounds
        return np.asarray(d.accept, dtype=bool)
