"""``python -m simulations.abcdp_repro``: one subcommand per reproduced experiment."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from simulations.abcdp_repro.common import (
    Row,
    load_shared_json,
    parse_eps,
)
from simulations.abcdp_repro.covid import CovidSettings, covid_repro
from simulations.abcdp_repro.federated import FederatedGrid, federated_repro
from simulations.abcdp_repro.flip import flip_repro
from simulations.abcdp_repro.tb import TbSettings, tb_repro
from simulations.abcdp_repro.toy import ToyGrid, toy_repro

DESCRIPTION = (
    "Reproductions of the ABCDP paper's experiments (single-owner ABCDP), each writing a figure and a table."
)


SEEDED_NOISE_HELP = "draw the DP noise from --seed (repeatable simulation only; gives no privacy)"


def _common(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--out", type=Path, required=True, help="output directory")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--data-dir", type=Path, default=None, help="data folder (default simulations/data)")


def _seeded_noise(sp: argparse.ArgumentParser, text: str = SEEDED_NOISE_HELP) -> None:
    sp.add_argument("--seeded-noise", dest="secure_noise", action="store_false", help=text)


def _add_flip(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    f = sub.add_parser("flip", help="flip probability figure with Monte Carlo check")
    _common(f)
    f.add_argument("--n-rho", type=int, default=100)
    f.add_argument("--mc-draws", type=int, default=20000)
    f.add_argument("--no-resample", action="store_true", help="b = (c+1)Δ/ε_total instead of 2cΔ/ε_total")


def _add_toy(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    t = sub.add_parser("toy", help="toy mixture grid: MAE vs ε_abc")
    _common(t)
    t.add_argument("--runs", type=int, default=60)
    t.add_argument("--candidates", type=int, default=10000)
    t.add_argument("--n-obs", type=int, default=None)
    t.add_argument("--c", type=int, nargs="+", default=None)
    t.add_argument("--eps-abc", type=float, nargs="+", default=None)
    t.add_argument("--eps-total", type=parse_eps, nargs="+", default=None)
    t.add_argument("--bandwidth", default="0.6", help="RFF bandwidth (number) or 'median' (prior predictive)")
    t.add_argument("--features", type=int, default=100)
    _seeded_noise(t)


def _add_covid(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("covid", help="COVID-19 cubic growth model")
    _common(c)
    c.add_argument("--candidates", type=int, default=50000)
    c.add_argument("--c", type=int, default=10)
    c.add_argument("--eps-abc", type=float, default=0.02)
    c.add_argument("--eps-total", type=parse_eps, nargs="+", default=[math.inf, 100.0, 10.0])
    c.add_argument("--resample", action="store_true")
    c.add_argument("--features", type=int, default=500)
    _seeded_noise(c)


def _add_tb(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("tb", help="tuberculosis birth-death model")
    _common(b)
    b.add_argument("--records", type=int, nargs="+", default=[100, 1000])
    b.add_argument("--candidates", type=int, default=1000)
    b.add_argument("--pseudo", type=int, default=5, help="simulated data sets per candidate")
    b.add_argument("--c", type=int, default=10)
    b.add_argument("--eps-total", type=parse_eps, default=1.0)
    b.add_argument("--eps-abc", type=float, default=None, help="default: from a public simulation pilot")
    b.add_argument("--clip", type=float, default=None, help="default: from a public simulation pilot")
    b.add_argument("--resample", action="store_true")
    b.add_argument("--repeats", type=int, default=1, help="independent ABCDP runs per setting")
    _seeded_noise(b)


def _add_federated(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fd = sub.add_parser("federated", help="toy grid: single-owner vs federated ABCDP (in-memory protocol)")
    _common(fd)
    fd.add_argument("--parties", type=int, default=7)
    fd.add_argument("--reps", type=int, default=10)
    fd.add_argument("--c", type=int, nargs="+", default=[10])
    fd.add_argument("--eps-abc", type=float, nargs="+", default=[0.1, 0.2])
    fd.add_argument("--eps-total", type=parse_eps, nargs="+", default=[1.0, math.inf])
    fd.add_argument("--resample", choices=["both", "yes", "no"], default="both")
    fd.add_argument("--full-grid", action="store_true", help="the paper's grid from abcdp_toy.json (long)")
    fd.add_argument("--n-obs", type=int, default=None, help="N (default 5000, from abcdp_toy.json)")
    fd.add_argument("--features", type=int, default=100)
    fd.add_argument("--bandwidth", type=float, default=0.6)
    fd.add_argument("--batch-size", type=int, default=128)
    fd.add_argument("--max-candidates", type=int, default=20000)
    fd.add_argument(
        "--noise-shares",
        choices=["exact", "robust"],
        default="exact",
        help="exact: shares sum to Lap(b) (same law as single owner; ε vs the coordinator only); "
        "robust: Lap(b) survives any coalition < m/2 (more noise)",
    )
    fd.add_argument(
        "--backend",
        choices=["mpc", "plaintext"],
        default="mpc",
        help="mpc: the secret-shared protocol in memory; plaintext: its float reference (checks)",
    )
    _seeded_noise(
        fd, "draw the DP noise and party randomness from --seed (repeatable simulation only; no privacy)"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m simulations.abcdp_repro", description=DESCRIPTION)
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_add_flip, _add_toy, _add_covid, _add_tb, _add_federated):
        add(sub)
    return p


def _run_flip(args: argparse.Namespace) -> list[Row]:
    return flip_repro(
        args.out,
        n_rho=args.n_rho,
        mc_draws=args.mc_draws,
        resample=not args.no_resample,
        seed=args.seed,
    )


def _run_toy(args: argparse.Namespace) -> list[Row]:
    bw: float | str = "median" if args.bandwidth == "median" else float(args.bandwidth)
    return toy_repro(
        args.out,
        ToyGrid(
            runs=args.runs,
            n_candidates=args.candidates,
            n_obs=args.n_obs,
            cs=args.c,
            eps_abcs=args.eps_abc,
            eps_totals=args.eps_total,
            bandwidth=bw,
            n_features=args.features,
            seed=args.seed,
            secure_noise=args.secure_noise,
            data_dir=args.data_dir,
        ),
    )


def _run_covid(args: argparse.Namespace) -> list[Row]:
    return covid_repro(
        args.out,
        CovidSettings(
            n_candidates=args.candidates,
            c=args.c,
            eps_abc=args.eps_abc,
            eps_totals=args.eps_total,
            resample=args.resample,
            n_features=args.features,
            seed=args.seed,
            secure_noise=args.secure_noise,
            data_dir=args.data_dir,
        ),
    )


def _run_federated(args: argparse.Namespace) -> list[Row]:
    cs, eas, ets = args.c, args.eps_abc, args.eps_total
    rss = {"both": (False, True), "yes": (True,), "no": (False,)}[args.resample]
    if args.full_grid:
        grid = load_shared_json("abcdp_toy.json", args.data_dir)["grid"]
        cs, eas = list(grid["c"]), [float(e) for e in grid["eps_abc"]]
        ets, rss = [parse_eps(str(e)) for e in grid["eps_total"]], (False, True)
    return federated_repro(
        args.out,
        FederatedGrid(
            parties=args.parties,
            reps=args.reps,
            cs=cs,
            eps_abcs=eas,
            eps_totals=ets,
            resamples=rss,
            n_obs=args.n_obs,
            n_features=args.features,
            bandwidth=args.bandwidth,
            batch_size=args.batch_size,
            max_candidates=args.max_candidates,
            noise_shares=args.noise_shares,
            backend=args.backend,
            seed=args.seed,
            secure_noise=args.secure_noise,
            data_dir=args.data_dir,
        ),
    )


def _run_tb(args: argparse.Namespace) -> list[Row]:
    return tb_repro(
        args.out,
        TbSettings(
            records=args.records,
            n_candidates=args.candidates,
            n_pseudo=args.pseudo,
            c=args.c,
            eps_total=args.eps_total,
            resample=args.resample,
            eps_abc=args.eps_abc,
            clip=args.clip,
            repeats=args.repeats,
            seed=args.seed,
            secure_noise=args.secure_noise,
            data_dir=args.data_dir,
        ),
    )


RUNS = {"flip": _run_flip, "toy": _run_toy, "covid": _run_covid, "tb": _run_tb, "federated": _run_federated}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rows = RUNS[args.command](args)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print((args.out / f"{args.command}.md").read_text())
    if args.command == "toy" and (args.out / "toy_reference.md").is_file():
        print((args.out / "toy_reference.md").read_text())
    return 0 if rows else 1
