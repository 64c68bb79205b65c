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
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from coordinator.certs import COORDINATOR_IDENTITY, init_consortium, party_identity
from proto.spec import PartyEntry
from proto.tls import TlsMaterial

if TYPE_CHECKING:
    from coordinator.abcdp import FederatedAbcdpResult
    from mechanisms.abcdp.federated import FederatedSvtPlan


class LaunchError(RuntimeError):
    """A daemon did not start (the message includes the tail of its log)."""


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):  # an inline table (a formula model's columns)
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if v is None:
        raise TypeError("cannot write None to TOML (leave the key out)")
    raise TypeError(f"cannot write {v!r} to TOML")


@dataclass(frozen=True)
class PartyOptions:
    """What a local registry's config says beyond its identity, peers and records (:func:`party_config_text`):
    ``[allow]`` (models, reveal modes, plug-in paths, whether a blocked run's effect draws may leave),
    ``[budget]`` (``max_decisions`` and the privacy budget's entries, e.g. ``{"gdp_mu": 2.0}``),
    ``[limits]``, ``[governance]`` and ``[admin]``, the data's model, and ``[testing]`` (a fixed noise key,
    fault injection, deliberate deviations)."""

    models: Sequence[str] = ("gaussian-mean",)
    modes: Sequence[str] = ("sum", "blinded", "sign")
    max_decisions: int = 10_000_000
    round_timeout_s: float = 30.0
    fixed_rng_key: bytes | None = None
    peer_addresses: Mapping[int, str] | None = None
    data_model: str | None = None
    data_model_args: Mapping[str, Any] | None = None
    privacy_budget: Mapping[str, Any] | None = None
    freeze_at: Sequence[str] = ()
    deviate: Sequence[str] = ()
    data_table: Mapping[str, Any] | None = None
    model_path: Sequence[Path] = ()
    require_approval: bool = False
    admin_listen: str | None = None
    release_effects: bool = False


def party_config_text(
    pid: int,
    m: int,
    workdir: Path,
    certs: Path | None,
    data_path: Path | None,
    options: PartyOptions | None = None,
) -> str:
    """A party's config. Its records: ``data_path`` (a CSV or Parquet file), or ``options.data_table``, the
    entries of a ``[data]`` table (``simulations.registries.data_table``: a database or an endpoint)."""
    o = options or PartyOptions()
    models, modes, max_decisions, round_timeout_s = o.models, o.modes, o.max_decisions, o.round_timeout_s
    fixed_rng_key, peer_addresses, data_model, data_model_args = (
        o.fixed_rng_key, o.peer_addresses, o.data_model, o.data_model_args
    )  # fmt: skip
    privacy_budget, freeze_at, deviate, data_table = o.privacy_budget, o.freeze_at, o.deviate, o.data_table
    model_path, require_approval, admin_listen, release_effects = (
        o.model_path, o.require_approval, o.admin_listen, o.release_effects
    )  # fmt: skip
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
    if data_path is not None or data_table is not None:
        entries = dict(data_table) if data_table is not None else {"path": str(data_path)}
        lines += ["[data]", *[f"{k} = {_toml_value(v)}" for k, v in entries.items()]]
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
        *([f"model_path = {_toml_value([str(f) for f in model_path])}"] if model_path else []),
        *(["release_effects = true"] if release_effects else []),  # a blocked run's effect draws may leave
        "",
        "[budget]",
        f"max_decisions = {max_decisions}",
        *[f"{k} = {_toml_value(v)}" for k, v in (privacy_budget or {}).items()],  # e.g. {"gdp_mu": 2.0}
        "",
        "[limits]",
        f"round_timeout_s = {round_timeout_s}",
        "",
    ]
    if require_approval:  # issue 37: only sessions of a study this registry approved
        lines += ["[governance]", "require_approval = true", ""]
    if admin_listen is not None:  # issue 37: the read-only report on a loopback port
        lines += ["[admin]", f"listen = {_toml_value(admin_listen)}", ""]
    testing = []
    if fixed_rng_key is not None:
        testing.append(f'fixed_rng_key = "{fixed_rng_key.hex()}"')
    if freeze_at:  # fault injection: ["<phase>@<run step>", ...] (parties.config.FREEZE_PHASES)
        testing.append(f"freeze_at = {_toml_value(list(freeze_at))}")
    if deviate:  # testing: this party sends wrong messages on purpose (parties/deviate.py)
        testing.append(f"deviate = {_toml_value(list(deviate))}")
    if testing:
        lines += ["[testing]", *testing, ""]
    return "\n".join(lines)


def write_csv(path: Path, columns: dict[str, npt.ArrayLike]) -> None:
    """A header row, then one record per line: numbers as ``%.17g`` (exact), text columns (a categorical
    column's labels: ``simulations.registries.with_labels``) as they are."""
    names = list(columns)
    cols = []
    for n in names:
        arr = np.asarray(columns[n])
        text = arr.dtype.kind in "USO"
        cols.append([str(v) for v in arr.tolist()] if text else [f"{v:.17g}" for v in arr.astype(np.float64)])
    lines = [",".join(names)] + [",".join(row) for row in zip(*cols, strict=True)]
    path.write_text("\n".join(lines) + "\n")


# Daemons are forked from a server process that has imported the daemon's code once (multiprocessing's
# forkserver, Linux): a daemon started by ``python -m parties.cli serve`` spends 1.5-2 s of CPU importing
# numpy, scipy, grpc, dp_accounting and the project before it reads its config, and the test suite starts
# hundreds of them. Each daemon is still its own OS process, running ``parties.cli.main(["serve", ...])``
# with its own log, working directory and environment (the caller's at spawn time, not the server's); only
# the interpreter's start-up is shared. The fork happens before any gRPC channel or server exists (the
# server process only imports), and every secret the daemon draws comes from the OS (``secrets``), never
# from state copied at the fork. ``CONFAR_DAEMON_START=exec`` (or another platform) starts each daemon with
# its own interpreter as before.
_PRELOAD = [
    "parties.cli",
    "parties.daemon",
    "simulations.launcher",
    "mechanisms.privacy.composition",
    "dp_accounting.pld.pld_pmf",
    "dp_accounting.pld.privacy_loss_distribution",
    # a formula model's parser (pandas and formulaic: 0.5 s of CPU per daemon quiet, 1.3 s measured with
    # py-spy in a 4-registry run) was imported by every formula daemon at its first session; once here
    "pandas",
    "formulaic",
]
_FORK_CONTEXT: Any = None


def _fork_context() -> Any:
    global _FORK_CONTEXT
    if _FORK_CONTEXT is None:
        import multiprocessing

        _FORK_CONTEXT = multiprocessing.get_context("forkserver")
        _FORK_CONTEXT.set_forkserver_preload(_PRELOAD)
    return _FORK_CONTEXT


def _forked() -> bool:
    return sys.platform == "linux" and os.environ.get("CONFAR_DAEMON_START", "fork") != "exec"


def _serve_forked(argv: list[str], log: str, cwd: str, env: dict[str, str]) -> None:
    """The daemon's main in a forked process: stdout and stderr to its log, the caller's cwd and env."""
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["confar-party", *argv]
    from parties.cli import main

    code = main(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


class ForkedDaemon:
    """A forked daemon with the part of ``subprocess.Popen``'s interface the launcher and its callers use
    (pid, poll, wait, send_signal, returncode)."""

    def __init__(self, argv: list[str], log: Path, cwd: Path) -> None:
        ctx = _fork_context()
        self._p = ctx.Process(
            target=_serve_forked, args=(argv, str(log), str(cwd), dict(os.environ)), daemon=True
        )
        self._p.start()
        self.args = argv

    @property
    def pid(self) -> int:
        return int(self._p.pid)

    @property
    def returncode(self) -> int | None:
        code = self._p.exitcode
        return None if code is None else int(code)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._p.join(timeout)
        code = self.returncode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)


@dataclass
class PartyProcess:
    id: int
    proc: subprocess.Popen[bytes] | ForkedDaemon
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
        startup_timeout_s: float = 60.0,
        keep: bool = False,
        fixed_rng_keys: dict[int, bytes] | None = None,
        deviate: dict[int, Sequence[str]] | None = None,
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
                        PartyOptions(
                            fixed_rng_key=(fixed_rng_keys or {}).get(pid),
                            deviate=(deviate or {}).get(pid, ()),
                            **config_kwargs,
                        ),
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
        argv = ["serve", "--config", str(cfg), *(["--insecure"] if insecure else [])]
        root = Path(__file__).resolve().parent.parent
        if _forked():
            pp = PartyProcess(pid, ForkedDaemon(argv, log, root), cfg, log)
            self.procs[pid] = pp
            return pp
        cmd = [sys.executable, "-m", "parties.cli", *argv]
        with open(log, "ab") as fh:
            proc: subprocess.Popen[bytes] | ForkedDaemon = subprocess.Popen(
                cmd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=str(root),
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

    def endpoints(self) -> list[PartyEntry]:
        return [PartyEntry(pid, party_identity(pid), pp.address) for pid, pp in sorted(self.procs.items())]

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

    def restart(self, pid: int, timeout_s: float = 60.0, insecure: bool = False) -> PartyProcess:
        """Start party ``pid`` again on its config and state (after :meth:`kill`); it listens on a new port,
        so take :meth:`endpoints` afresh."""
        pp = self.procs[pid]
        if pp.proc.poll() is None:
            raise RuntimeError(f"party {pid} (PID {pp.proc.pid}) is still running; kill it first")
        new = self.spawn(pid, pp.config, insecure)
        deadline = time.monotonic() + timeout_s
        addr_file = new.config.parent / "address"
        while not addr_file.exists():
            if new.proc.poll() is not None:
                code = new.proc.returncode
                raise LaunchError(f"party {pid} exited with code {code}:\n{self.log_tail(pid)}")
            if time.monotonic() > deadline:
                tail = self.log_tail(pid)
                raise LaunchError(f"party {pid} did not restart within {timeout_s:g} s:\n{tail}")
            time.sleep(0.02)
        new.address = addr_file.read_text().strip()
        return new

    def wait_stopped(self, pid: int, timeout_s: float = 60.0) -> None:
        """Wait until party ``pid`` stopped itself (SIGSTOP, ``[testing] freeze_at``); raise if it exited or
        did not stop within ``timeout_s``."""
        pp = self.procs[pid]
        deadline = time.monotonic() + timeout_s
        while True:
            if pp.proc.poll() is not None:
                raise LaunchError(f"party {pid} exited (code {pp.proc.returncode}) instead of stopping")
            if _proc_state(pp.proc.pid) == "T":
                return
            if time.monotonic() > deadline:
                raise LaunchError(f"party {pid} did not reach its freeze point within {timeout_s:g} s")
            time.sleep(0.02)

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


def _proc_state(pid: int) -> str:
    """The state letter of process ``pid`` from /proc (Linux): R, S, T (stopped), Z, ..."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


# ---- confar simulate -------------------------------------------------------------------------------------

HELP = (
    "run a confidential MH session (default) or a federated ABCDP run (--sampler abcdp) among N local "
    "confar-party processes (certs in a temp dir)"
)


def add_arguments(p: Any) -> None:
    p.add_argument("--parties", type=int, default=3, help="number of parties m (default 3)")
    p.add_argument(
        "--sampler",
        choices=("mh", "abcdp"),
        default="mh",
        help="mh (default): confidential MH on synthetic N(mu, 1) data; abcdp: federated c-sample ABCDP on "
        "the toy mixture model (reveal mode svt)",
    )
    p.add_argument(
        "--mode", choices=("sum", "blinded", "sign"), default="sign", help="MH reveal mode (default sign)"
    )
    p.add_argument("--topology", choices=("mesh", "relay"), default="mesh")
    p.add_argument("--records", type=int, default=200, help="records per party (synthetic N(mu, 1) data)")
    p.add_argument("--mu", type=float, default=1.3, help="true mean of the synthetic data")
    p.add_argument("--chains", type=int, default=64, help="MH chains = decisions per batch")
    p.add_argument("--steps", type=int, default=60, help="MH steps (one batch each)")
    p.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic data (public)")
    p.add_argument("--insecure", action="store_true", help="plaintext gRPC (prints a warning)")
    p.add_argument("--keep", action="store_true", help="keep the work dir (logs, audit logs)")
    g = p.add_argument_group("--sampler abcdp (toy mixture of uniforms, ABCDP paper section 6.1)")
    g.add_argument("--n-obs", type=int, default=5000, help="observed records N, split across the parties")
    g.add_argument("--n-sim", type=int, default=1000, help="simulated points per candidate (default 1000)")
    g.add_argument("--c", type=int, default=20, help="accepts after which the run halts (default 20)")
    g.add_argument("--eps-abc", type=float, default=0.15, help="ABC threshold on the RFF-MMD (default 0.15)")
    g.add_argument("--eps-total", default="1.0", help="epsilon of the whole run, or 'inf' (default 1.0)")
    g.add_argument("--resample", action="store_true", help="redraw the threshold noise after each accept")
    g.add_argument("--features", type=int, default=100, help="random Fourier features D (default 100)")
    g.add_argument("--bandwidth", type=float, default=0.6, help="public kernel bandwidth (default 0.6)")
    g.add_argument("--batch", type=int, default=64, help="candidates per Evaluate step (default 64)")
    g.add_argument(
        "--party-epsilon", type=float, default=10.0, help="each party's epsilon budget (at delta 1e-6)"
    )


def run(args: Any) -> int:
    from coordinator.api import BlockingCoordinator, SessionError, SessionOptions
    from proto.tls import warn_insecure

    m = args.parties
    if not 2 <= m <= 15:
        print("confar simulate: --parties must be in 2..15", file=sys.stderr)
        return 2
    if args.insecure:
        warn_insecure("confar simulate")
    if getattr(args, "sampler", "mh") == "abcdp":
        return run_abcdp(args)
    rng = np.random.default_rng(args.data_seed)
    data = [rng.normal(args.mu, 1.0, args.records) for _ in range(m)]
    allx = np.concatenate(data)
    post_mean, post_sd = float(allx.mean()), 1.0 / np.sqrt(allx.size)  # flat prior, sigma = 1
    t0 = time.perf_counter()
    try:
        with LocalConsortium.start(m, data, insecure=args.insecure, keep=args.keep) as lc:
            print(f"started {m} parties in {time.perf_counter() - t0:.2f} s under {lc.workdir}", flush=True)
            with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls()) as coord:
                sess = coord.open_session(SessionOptions(
                    reveal_mode=args.mode,
                    model="gaussian-mean",
                    model_params={"model_args": {"sigma": 1.0}},
                    topology=args.topology,
                ))
                # public randomness of the sampler (proposals) may come from a public seed
                prng = np.random.default_rng(args.data_seed + 1)
                theta = prng.normal(0.0, 1.0, args.chains)
                accepted, t1 = 0, time.perf_counter()
                samples = []
                for k in range(args.steps):
                    # burn-in with long jumps from the dispersed start, then the usual 2.4 sd random walk
                    scale = (10.0 if k < args.steps // 2 else 2.4) * post_sd
                    prop = theta + scale * prng.normal(size=args.chains)
                    d = sess.evaluate(
                        {"theta": theta, "theta_star": prop, "public": np.zeros(args.chains)}, args.chains
                    )
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


def run_abcdp(args: Any) -> int:
    """``confar simulate --sampler abcdp``: federated c-sample ABCDP on the toy model through real daemons.

    The observed data (N records from the toy mixture at the true θ*, ``simulations/data/abcdp_toy.json``)
    are split across the m parties; each party holds its records in a CSV column ``y``, allows only
    ``abcdp-rff`` in reveal mode ``svt`` and has an eps-at-delta privacy budget in which it charges the run's
    ε once. Simulations and proposals use the public seed; the DP noise comes from each party's CSPRNG.
    """
    from coordinator.abcdp import FederatedRunOptions, charged_epsilons, run_federated_abcdp
    from coordinator.api import BlockingCoordinator, SessionError
    from hss.fixedpoint import max_threshold
    from mechanisms.simulators.toy import ToyMixtureModel
    from parties.abcdp import tolerated_colluders

    m = args.parties
    if m < 3:
        print("confar simulate: --sampler abcdp needs --parties >= 3 (honest majority)", file=sys.stderr)
        return 2
    try:
        plan, theta_true = _abcdp_plan(args)
    except (ValueError, OSError) as exc:
        print(f"confar simulate: {exc}", file=sys.stderr)
        return 2
    model = ToyMixtureModel(n_components=theta_true.shape[0])
    rng = np.random.default_rng(args.data_seed)  # public seed of this simulation (the "private" data too)
    observed = model.simulate(theta_true, args.n_obs, rng)[0]
    data = [{"y": part} for part in np.array_split(observed, m)]
    budget: dict[str, Any] | None = None
    if plan.is_private:  # colluding: the coalitions the plan's epsilon is backed against (parties.abcdp)
        colluding = tolerated_colluders(plan, m, max_threshold(m))  # sessions use the default threshold
        budget = {"epsilon": args.party_epsilon, "delta": 1e-6, "colluding": colluding}

    def prior_sample(g: np.random.Generator, k: int) -> npt.NDArray[np.float64]:
        return model.sample_prior(g, k)

    def simulate(thetas: npt.NDArray[np.float64], g: np.random.Generator) -> npt.NDArray[np.float64]:
        return model.simulate(thetas, args.n_sim, g)

    t0 = time.perf_counter()
    try:
        with LocalConsortium.start(
            m,
            data,
            insecure=args.insecure,
            keep=args.keep,
            models=("abcdp-rff",),
            modes=("svt",),
            privacy_budget=budget,
            startup_timeout_s=30.0 + 10.0 * m,
        ) as lc:
            print(f"started {m} parties in {time.perf_counter() - t0:.2f} s under {lc.workdir}", flush=True)
            with BlockingCoordinator(lc.endpoints(), lc.coordinator_tls()) as coord:
                res = run_federated_abcdp(
                    coord,
                    plan,
                    prior_sample,
                    simulate,
                    args.batch,
                    args.data_seed + 1,
                    FederatedRunOptions(
                        columns=["y"],
                        topology=args.topology,
                    ),
                )
                charged = charged_epsilons(coord, res.session_id)
    except (SessionError, LaunchError) as exc:
        print(f"confar simulate: {exc}", file=sys.stderr)
        return 1
    _print_abcdp(args, plan, res, charged, budget, theta_true)
    return 0 if res.done else 1


def _abcdp_plan(args: Any) -> tuple[FederatedSvtPlan, npt.NDArray[np.float64]]:
    """The public plan from the command line and the toy model's true θ*; ValueError or OSError if bad."""
    import math

    from mechanisms.abcdp.federated import FederatedSvtPlan
    from simulations.abcdp_repro.common import load_shared_json

    eps_total = math.inf if str(args.eps_total).lower() in ("inf", "infinity") else float(args.eps_total)
    theta_true = np.asarray(load_shared_json("abcdp_toy.json")["theta_true"], dtype=np.float64)
    plan = FederatedSvtPlan(
        eps_abc=args.eps_abc,
        eps_total=eps_total,
        c=args.c,
        resample=bool(args.resample),
        n_records=args.n_obs,
        n_features=args.features,
        bandwidth=args.bandwidth,
        dim=1,
        map_seed=args.data_seed + 2,
    )
    if args.n_sim < 1 or args.batch < 1 or args.n_obs < args.parties:
        raise ValueError("--n-sim and --batch must be >= 1 and --n-obs >= --parties")
    return plan, theta_true


def _print_abcdp(
    args: Any,
    plan: FederatedSvtPlan,
    res: FederatedAbcdpResult,
    charged: dict[int, float],
    budget: dict[str, Any] | None,
    theta_true: npt.NDArray[np.float64],
) -> None:
    """What ``confar simulate --sampler abcdp`` prints after the run."""
    import math

    mean = res.posterior_mean()
    print(
        f"sampler=abcdp topology={args.topology} m={args.parties} N={args.n_obs} c={plan.c} "
        f"eps_abc={plan.eps_abc:g} "
        f"eps_total={plan.eps_total:g} resample={plan.resample} D={plan.n_features} batch={args.batch}"
    )
    print(
        f"accepted {res.n_accepted} of c = {plan.c} after {res.n_evaluated} revealed decisions "
        f"({res.n_sent} candidates sent in {res.steps} steps; {res.n_proposed} proposed)"
    )
    t = res.timings
    print(
        f"time {t['total_s']:.2f} s (network {t['evaluate_s']:.2f} s, simulation {t['propose_s']:.2f} s): "
        f"{res.decisions_per_s:.1f} decisions/s"
    )
    with np.printoptions(precision=3, suppress=True):
        print(f"posterior mean {mean}  true theta* {theta_true}")
    mae = float(np.mean(np.abs(mean - theta_true))) if res.n_accepted else math.nan
    print(f"mean absolute error {mae:.4f} (prior mean: {float(np.mean(np.abs(0.2 - theta_true))):.4f})")
    if budget is None:
        print("privacy: eps_total = inf, a non-private run (no noise); nothing charged")
    else:
        per = ", ".join(f"party {pid}: {eps:.4g}" for pid, eps in sorted(charged.items()))
        print(
            f"privacy charged by each party in its own ledger (once per run; pure eps, replace-one, against "
            f"the coordinator and up to {budget['colluding']} colluding parties): {per}"
        )
