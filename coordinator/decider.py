"""The deciders over the party network: each request is one ``Evaluate`` step of an open session.

:class:`NetworkDecider` decides a sampler's batches:

    with BlockingCoordinator(endpoints, tls) as coord:
        opts = SessionOptions(reveal_mode="sign", model="bayes-logistic", model_params={...})
        sess = coord.open_session(opts)
        kernel = RandomWalkMH(model, NetworkDecider(sess), cov)      # mechanisms.samplers

The kernel builds the same public :class:`~mechanisms.samplers.requests.DecisionRequest` it would give an
in-memory decider; the parties compute their terms with the same code (``parties/models_bridge.py``). The
session's decision plan (``mechanisms.kinds.DecisionPlan``, its ``model_params``) fixes the kind (mh /
rejection) and the penalty; the request must agree.

:class:`NetworkSvtDecider` decides federated ABCDP's batches (``mechanisms.abcdp.driver.drive_abcdp``) in a
session in reveal mode ``svt`` (analysis ``abcdp-rff``): it sends the candidates' embeddings
(``inputs = {"phibar": ...}``) and returns the SVT bits the parties reveal; the in-memory counterpart is
``mechanisms.abcdp.federated_run.LocalSvtParties``. The parties keep their own noise and SVT state (their
count of accepts left), so the request's ``remaining`` and ``step`` are not sent: the session's run step
numbering (``first_run_step``) is the step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from coordinator.api import BlockingSession
from hss.modes import FEATURES, reveal_mode
from mechanisms.abcdp.driver import SvtRequest
from mechanisms.kinds import DecisionPlan
from mechanisms.samplers.requests import DecisionRequest


@dataclass
class NetworkDecider:
    session: BlockingSession
    calls: int = 0
    decisions: int = 0
    rounds: int = 0
    plan: DecisionPlan = field(init=False)

    def __post_init__(self) -> None:
        self.plan = DecisionPlan.from_params(self.session.spec.model_params)

    def __call__(self, request: DecisionRequest) -> npt.NDArray[np.bool_]:
        if request.kind != self.plan.kind:
            raise ValueError(f"this session decides {self.plan.kind!r} requests, got {request.kind!r}")
        if request.penalty != self.plan.penalty:
            raise ValueError("the request's penalty and the session's decision plan disagree")
        inputs: dict[str, npt.ArrayLike] = dict(request.to_inputs())
        d = self.session.evaluate(inputs, request.n)
        self.calls += 1
        self.decisions += request.n
        tr = self.session.session.last_transcript
        if tr is not None:
            self.rounds += tr.rounds
        return np.asarray(d.accept, dtype=bool)


@dataclass
class NetworkSvtDecider:
    """An SVT decider (``mechanisms.abcdp.driver.SvtDecider``) over a session in reveal mode ``svt``."""

    session: BlockingSession
    calls: int = 0
    seconds: float = 0.0  # wall time in Evaluate

    def __call__(self, request: SvtRequest) -> npt.NDArray[np.bool_]:
        mode = self.session.spec.reveal_mode
        if reveal_mode(mode).inputs != FEATURES:
            raise ValueError(f"SVT requests need a session in reveal mode 'svt', not {mode!r}")
        t = time.perf_counter()
        d = self.session.evaluate({"phibar": request.phibar}, request.n)
        self.seconds += time.perf_counter() - t
        self.calls += 1
        return np.asarray(d.accept, dtype=bool)
