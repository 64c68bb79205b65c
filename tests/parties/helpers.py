"""In-process consortia for the party and coordinator integration tests: real PartyDaemon gRPC servers (mTLS
on loopback) in the test's event loop, so these tests avoid process start-up costs. The cross-process tests
(tests/network) start daemon processes with simulations.launcher instead and borrow the data and TLS helpers
from here."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.api import Coordinator
from coordinator.certs import init_consortium, party_identity
from parties.config import load_config
from parties.daemon import PartyDaemon
from proto.spec import PartyEntry
from proto.tls import TlsMaterial
from simulations.launcher import PartyOptions, party_config_text, write_csv


def make_certs(root: Path, m: int) -> Path:
    certs = root / "certs"
    if not (certs / "ca.pem").exists():
        init_consortium(certs, m)
    return certs


def tls_for(certs: Path, identity: str) -> TlsMaterial:
    return TlsMaterial.load(certs / f"{identity}.pem", certs / f"{identity}.key", certs / "ca.pem", identity)


def party_data(m: int, n: int = 40, seed: int = 0) -> list[npt.NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    return [rng.normal(1.0, 1.0, n) for _ in range(m)]


@contextlib.asynccontextmanager
async def inproc_consortium(
    root: Path,
    m: int,
    data: Sequence[npt.ArrayLike | Mapping[str, npt.ArrayLike]] | None = None,
    *,
    fixed_keys: dict[int, bytes] | None = None,
    insecure: bool = False,
    **config_kwargs: Any,
) -> AsyncIterator[tuple[list[PartyDaemon], list[PartyEntry], Path | None]]:
    certs = None if insecure else make_certs(root, m)
    data = data if data is not None else party_data(m)
    daemons: list[PartyDaemon] = []
    try:
        for pid in range(1, m + 1):
            pdir = root / f"party-{pid}"
            pdir.mkdir(parents=True, exist_ok=True)
            records = data[pid - 1]  # a column x, or a table of named columns
            write_csv(pdir / "data.csv", dict(records) if isinstance(records, Mapping) else {"x": records})
            cfg_path = pdir / "party.toml"
            cfg_path.write_text(
                party_config_text(
                    pid,
                    m,
                    root,
                    certs,
                    pdir / "data.csv",
                    PartyOptions(
                        fixed_rng_key=(fixed_keys or {}).get(pid),
                        **config_kwargs,
                    ),
                )
            )
            d = PartyDaemon(load_config(cfg_path, insecure=insecure), insecure=insecure)
            await d.start()
            daemons.append(d)
        eps = [PartyEntry(d.cfg.id, party_identity(d.cfg.id), f"127.0.0.1:{d.port}") for d in daemons]
        yield daemons, eps, certs
    finally:
        for d in daemons:
            await d.stop(grace=0.5)


@contextlib.asynccontextmanager
async def coordinator_for(
    eps: list[PartyEntry], certs: Path | None, **kw: Any
) -> AsyncIterator[Coordinator]:
    tls = tls_for(certs, "coordinator") if certs is not None else None
    async with Coordinator(eps, tls, **kw) as c:
        yield c


def gaussian_terms(
    x: npt.NDArray[np.float64],
    theta: npt.NDArray[np.float64],
    theta_star: npt.NDArray[np.float64],
    sigma: float = 1.0,
) -> npt.NDArray[np.float64]:
    return ((theta_star - theta) * x.sum() - 0.5 * x.size * (theta_star**2 - theta**2)) / sigma**2


def gm_params(
    sigma: float = 1.0, clip: tuple[float, float] | None = None, tau: float | None = None, **plan: Any
) -> dict[str, Any]:
    """A gaussian-mean session's ``model_params`` (a ``DecisionPlan``): x_i ~ N(theta, sigma^2), records
    clipped to ``clip``, the penalty sigma = tau c(theta, theta*) with n = 1 when ``tau`` is given."""
    args: dict[str, Any] = {"sigma": sigma}
    if clip is not None:
        args["clip"] = list(clip)
    out: dict[str, Any] = {"model_args": args, **plan}
    if tau is not None:
        out["penalty"] = {"tau": tau, "n": 1}
    return out


def gm_inputs(
    theta: npt.ArrayLike, theta_star: npt.ArrayLike, params: dict[str, Any], m: int
) -> dict[str, npt.NDArray[np.float64]]:
    """The coordinator's inputs of a gaussian-mean batch (theta, theta_star of shape (n,)): the public term is
    0 (flat prior ratio, symmetric proposal) plus, with the penalty, its correction -m sigma^2 / 2."""
    from mechanisms.kinds import DecisionPlan
    from mechanisms.models.base import load_model
    from mechanisms.samplers.penalty import penalty_correction

    th = np.asarray(theta, dtype=np.float64).reshape(-1)
    ts = np.asarray(theta_star, dtype=np.float64).reshape(-1)
    public = np.zeros(th.size)
    plan = DecisionPlan.from_params(params)
    if plan.penalty is not None:
        model = load_model("gaussian-mean", dict(plan.model_args))
        public += penalty_correction(plan.penalty.sigma(model, th[:, None], ts[:, None]), m)
    return {"theta": th, "theta_star": ts, "public": public}
