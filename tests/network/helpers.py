"""In-process consortia for the network tests: real PartyDaemon gRPC servers (mTLS on loopback) in the
test's event loop, so most tests avoid process start-up costs. Multi-process tests use
simulations.launcher instead."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
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
from simulations.launcher import party_config_text, write_csv


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
    data: Sequence[npt.ArrayLike] | None = None,
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
            write_csv(pdir / "data.csv", {"x": data[pid - 1]})
            cfg_path = pdir / "party.toml"
            cfg_path.write_text(
                party_config_text(
                    pid,
                    m,
                    root,
                    certs,
                    pdir / "data.csv",
                    fixed_rng_key=(fixed_keys or {}).get(pid),
                    **config_kwargs,
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
