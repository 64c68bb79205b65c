"""Local multi-process consortium: certificates, configs, data files and m real ``confar-party`` processes on
loopback ephemeral ports. Used by ``confar simulate``, the benchmarks and the multi-process tests.

    with LocalConsortium.start(m=3, data=[x1, x2, x3]) as lc:   # or data=[{"x1": ..., "y": ...}, ...]
        with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls()) as coord:
            ...

Every process the launcher starts is stopped by PID (SIGTERM, then SIGKILL after a grace period) when the
context exits — normally, on an exception, or on Ctrl-C. Daemons listen on 127.0.0.1 only; each writes its
bound address to a file the launcher waits for. Logs (stdout/stderr) and audit logs stay in the work dir.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from coordinator.api import PartyEndpoint
from coordinator.certs import COORDINATOR_IDENTITY, init_consortium, party_identity
from parties.tls import TlsMaterial


class LaunchError(RuntimeError):
    """A daemon did not start (the message includes the tail of its log)."""


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} to TOML")


def party_config_text(
    pid: int,
    m: int,
    workdir: Path,
    certs: Path | None,
    data_path: Path | None,
    *,
    models: Sequence[str] = ("gaussian-mean",),
    modes: Sequence[str] = ("sum", "blinded", "sign"),
    max_decisions: int = 10_000_000,
    round_timeout_s: float = 30.0,
    fixed_rng_key: bytes | None = None,
    peer_addresses: dict[int, str] | None = None,
    data_model: str | None = None,
    data_model_args: dict[str, Any] | None = None,
    privacy_budget: Mapping[str, Any] | None = None,
) -> str:
    pdir = workdir / f"party-{pid}"
    lines = [
        "[party]",
        f"id = {pid}",
        f'identity = "{party_identity(pid)}"',
        'listen = "127.0.0.1:0"',
        f"state_dir = {_toml_value(str(pdir / 'state'))}",
        f"address_file = {_toml_value(str(pdir / 'address'))}",
        "",
    ]
    if certs is not None:
        lines += [
            "[tls]",
            f"cert = {_toml_value(str(certs / f'party-{pid}.pem'))}",
            f"key = {_toml_value(str(certs / f'party-{pid}.key'))}",
            f"ca = {_toml_value(str(certs / 'ca.pem'))}",
            "",
        ]
    lines += ["[coordinator]", f'identity = "{COORDINATOR_IDENTITY}"', ""]
    for q in range(1, m + 1):
        if q != pid:
            lines += ["[[peers]]", f"id = {q}", f'identity = "{party_identity(q)}"']
            if peer_addresses and q in peer_addresses:
                lines.append(f'address = "{peer_addresses[q]}"')
            lines.append("")
    if data_path is not None:
        lines += ["[data]", f"path = {_toml_value(str(data_path))}"]
        if data_model is not None:
            lines.append(f"model = {_toml_value(data_model)}")
        lines.append("")
        if data_model_args:
            lines += ["[data.model_args]"]
            lines += [f"{k} = {_toml_value(v)}" for k, v in data_model_args.items()] + [""]
    lines += [
        "[allow]",
        f"models = {_toml_value(list(models))}",
        f"reveal_modes = {_toml_value(list(modes))}",
        "",
        "[budget]",
        f"max_decisions = {max_decisions}",
        *[f"{k} = {_toml_value(v)}" for k, v in (privacy_budget or {}).items()],  # e.g. {"gdp_mu": 2.0}
        "",
        "[limits]",
        f"round_timeout_s = {round_timeout_s}",
        "",
    ]
    if fixed_rng_key is not None:
        lines += ["[testing]", f'fixed_rng_key = "{fixed_rng_key.hex()}"', ""]
    return "\n".join(lines)


def write_csv(path: Path, columns: dict[str, npt.ArrayLike]) -> None:
    names = list(columns)
    arr = np.column_stack([np.asarray(columns[n], dtype=np.float64) for n in names])
    np.savetxt(path, arr, delimiter=",", header=",".join(names), comments="", fmt="%.17g")


@dataclass
class PartyProcess:
    id: int
    proc: subprocess.Popen[bytes]
    config: Path
    log: Path
    address: str = ""


@dataclass
class LocalConsortium:
    m: int
    workdir: Path
    certs: Path | None
    procs: dict[int, PartyProcess] = field(default_factory=dict)
    _tmp: tempfile.TemporaryDirectory[str] | None = None

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        m: int,
        data: Sequence[npt.ArrayLike | Mapping[str, npt.ArrayLike]] | None = None,
        *,
        workdir: Path | None = None,
        insecure: bool = False,
        startup_timeout_s: float = 30.0,
        keep: bool = False,
        fixed_rng_keys: dict[int, bytes] | None = None,
        **config_kwargs: Any,
    ) -> Iterator[LocalConsortium]:
        tmp = None
        if workdir is None:
            tmp = tempfile.TemporaryDirectory(prefix="confar-sim-")
            workdir = Path(tmp.name)
        certs = None if insecure else workdir / "certs"
        lc = cls(m, workdir, certs, _tmp=tmp)
        try:
            if certs is not None:
                init_consortium(certs, m)
            for pid in range(1, m + 1):
                pdir = workdir / f"party-{pid}"
                pdir.mkdir(parents=True, exist_ok=True)
                dpath = None
                if data is not None:
                    dpath = pdir / "data.csv"
                    own = data[pid - 1]
                    write_csv(dpath, dict(own) if isinstance(own, Mapping) else {"x": own})
                cfg = pdir / "party.toml"
                cfg.write_text(
                    party_config_text(
                        pid,
                        m,
                        workdir,
                        certs,
                        dpath,
                        fixed_rng_key=(fixed_rng_keys or {}).get(pid),
                        **config_kwargs,
                    )
                )
                lc.spawn(pid, cfg, insecure)
            lc.wait_ready(startup_timeout_s)
            yield lc
        finally:
            lc.stop()
            if tmp is not None and not keep:
                tmp.cleanup()

    def spawn(self, pid: int, cfg: Path, insecure: bool) -> PartyProcess:
        log = cfg.parent / "daemon.log"
        addr_file = cfg.parent / "address"
        addr_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "parties.cli", "serve", "--config", str(cfg)]
        if insecure:
            cmd.append("--insecure")
        with open(log, "ab") as fh:
            proc = subprocess.Popen(
                cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(Path(__file__).resolve().parent.parent),
            )
        pp = PartyProcess(pid, proc, cfg, log)
        self.procs[pid] = pp
        return pp

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for pid, pp in self.procs.items():
            addr_file = pp.config.parent / "address"
            while not pp.address:
                if pp.proc.poll() is not None:
                    raise LaunchError(
                        f"party {pid} exited with code {pp.proc.returncode}:\n{self.log_tail(pid)}"
                    )
                if addr_file.exists():
                    pp.address = addr_file.read_text().strip()
                    break
                if time.monotonic() > deadline:
                    raise LaunchError(
                        f"party {pid} did not start within {timeout_s:g} s:\n{self.log_tail(pid)}"
                    )
                time.sleep(0.02)

    def log_tail(self, pid: int, lines: int = 20) -> str:
        try:
            return "\n".join(self.procs[pid].log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def endpoints(self) -> list[PartyEndpoint]:
        return [PartyEndpoint(pid, party_identity(pid), pp.address) for pid, pp in sorted(self.procs.items())]

    def coordinator_tls(self) -> TlsMaterial | None:
        if self.certs is None:
            return None
        c = self.certs
        return TlsMaterial.load(
            c / "coordinator.pem", c / "coordinator.key", c / "ca.pem", COORDINATOR_IDENTITY
        )

    def kill(self, pid: int) -> None:
        """Hard-kill one party (failure tests)."""
        pp = self.procs[pid]
        if pp.proc.poll() is None:
            pp.proc.send_signal(signal.SIGKILL)
            pp.proc.wait(5)

    def stop(self, grace_s: float = 5.0) -> dict[int, int | None]:
        """SIGTERM every process we started (by PID), wait, SIGKILL stragglers; returns exit codes."""
        for pp in self.procs.values():
            if pp.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    pp.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        codes: dict[int, int | None] = {}
        for pid, pp in self.procs.items():
            try:
                codes[pid] = pp.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pp.proc.pid, signal.SIGKILL)
                codes[pid] = pp.proc.wait(5)
        return codes


# ---- confar simulate -------------------------------------------------------------------------------------

HELP = "run a confidential MH session among N local confar-party processes (certs in a temp dir)"


def add_arguments(p: Any) -> None:
    p.add_argument("--parties", type=int, default=3, help="number of parties m (default 3)")
    p.add_argument(
        "--mode", choices=("sum", "blinded", "sign"), default="sign", help="reveal mode (default sign)"
    )
    p.add_argument("--topology", choices=("mesh", "relay"), default="mesh")
    p.add_argument("--records", type=int, default=200, help="records per party (synthetic N(mu, 1) data)")
    p.add_argument("--mu", type=float, default=1.3, help="true mean of the synthetic data")
    p.add_argument("--chains", type=int, default=64, help="MH chains = decisions per batch")
    p.add_argument("--steps", type=int, default=60, help="MH steps (one batch each)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic data (public)")
    p.add_argument("--insecure", action="store_true", help="plaintext gRPC (prints a warning)")
    p.add_argument("--keep", action="store_true", help="keep the work dir (logs, audit logs)")


def run(args: Any) -> int:
    from coordinator.api import BlockingCoordinator, SessionError
    from parties.tls import warn_insecure

    m = args.parties
    if not 2 <= m <= 15:
        print("confar simulate: --parties must be in 2..15", file=sys.stderr)
        return 2
    if args.insecure:
        warn_insecure("confar simulate")
    rng = np.random.default_rng(args.data_seed)
    data = [rng.normal(args.mu, 1.0, args.records) for _ in range(m)]
    allx = np.concatenate(data)
    post_mean, post_sd = float(allx.mean()), 1.0 / np.sqrt(allx.size)  # flat prior, sigma = 1
    t0 = time.perf_counter()
    try:
        with LocalConsortium.start(m, data, insecure=args.insecure, keep=args.keep) as lc:
            print(f"started {m} parties in {time.perf_counter() - t0:.2f} s under {lc.workdir}", flush=True)
            with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls()) as coord:
                sess = coord.open_session(
                    reveal_mode=args.mode,
                    model="gaussian-mean",
                    model_params={"sigma": 1.0},
                    topology=args.topology,
                )
                # public randomness of the sampler (proposals) may come from a public seed
                prng = np.random.default_rng(args.data_seed + 1)
                theta = prng.normal(0.0, 1.0, args.chains)
                accepted, t1 = 0, time.perf_counter()
                samples = []
                for k in range(args.steps):
                    # burn-in with long jumps from the dispersed start, then the usual 2.4 sd random walk
                    scale = (10.0 if k < args.steps // 2 else 2.4) * post_sd
                    prop = theta + scale * prng.normal(size=args.chains)
                    d = sess.evaluate({"theta": theta, "theta_star": prop}, args.chains)
                    theta = np.where(d.accept, prop, theta)
                    accepted += int(d.accept.sum())
                    if k >= args.steps // 2:
                        samples.append(theta.copy())
                elapsed = time.perf_counter() - t1
                sess.close()
        est = np.concatenate(samples)
        print(f"mode={args.mode} topology={args.topology} m={m} chains={args.chains} steps={args.steps}")
        print(
            f"decisions: {args.chains * args.steps} in {elapsed:.2f} s "
            f"({args.chains * args.steps / elapsed:.0f}/s), "
            f"acceptance {accepted / (args.chains * args.steps):.2f}"
        )
        print(
            f"posterior mean: confidential MH {est.mean():.4f} (second half of every chain); "
            f"exact {post_mean:.4f} +- {post_sd:.4f} (pooled data, flat prior)"
        )
        return 0
    except (SessionError, LaunchError) as exc:
        print(f"confar simulate: {exc}", file=sys.stderr)
        return 1
