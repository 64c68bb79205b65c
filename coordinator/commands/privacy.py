"""``confar privacy ...``: the registries' privacy budgets.

* ``confar privacy plan PLAN.toml``: a dry run: every party computes, from its own config, the privacy
  events the planned session (analysis, parameters, reveal mode, batches x batch size) would add to its
  ledger and answers with its projected spend, remaining budget and whether it would refuse. No session is
  opened, no data is read, no ledger changes. Exit 1 when a party would refuse.
* ``confar privacy plan EXPERIMENT.toml [--epsilon E]``: offline, no daemon: what a budget buys the
  experiment (``coordinator.planner``: a warm start and a fixed-sd penalty run, priced from a pilot — the
  model's synthetic registries at the public sizes, or a formula model's design dataset): iterations,
  expected ESS and Monte Carlo error, the ε it
  spends, and the ε a usable posterior needs. ``--epsilon`` asks about other budgets than
  ``[privacy] target_epsilon``. Exit 1 when the target cannot buy ``min_ess``.
* ``confar privacy report PLAN.toml [--plot DIR] [--delta D]``: every party's ledger (the events its data
  took part in, its budget and its own spend in the budget's unit), recomposed here with
  ``mechanisms.privacy`` (GDP mu when every event has a GDP bound; eps at delta), and with ``--plot`` one
  trade-off plot per party. PLAN.toml's ``[session]`` is not needed. Exit 1 when a party could not be asked.
* ``confar privacy audit AUDIT.toml --out DIR``: a membership-inference audit of a registry's stated
  guarantee on the real protocol; the engine is :mod:`simulations.privacy_audit`, the service
  ``privacy-audit`` found by ``coordinator.plugins`` (the coordinator never imports simulations). Exit 0
  consistent (or no finite claim, reported), 1 VIOLATED.

PLAN.toml's schema is in :mod:`coordinator.privacy`. Exit 2: a bad file or argument.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordinator.commands import Command, Target
from coordinator.plugins import service

HELP = (
    "privacy budgets: plan (dry run of a session at every party), report (what each party spent) and audit "
    "(membership inference against a stated guarantee)"
)


def _plan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "plan",
        type=Path,
        help="PLAN.toml: parties, coordinator TLS, [session] (see coordinator.privacy); or an experiment "
        "file (offline: what its budget buys)",
    )
    p.add_argument(
        "--epsilon",
        type=float,
        action="append",
        metavar="E",
        help="experiment file: also plan for this target epsilon (repeatable)",
    )


def _is_experiment(path: Path) -> bool:
    import tomllib

    try:
        return "experiment" in tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False


def _offline_plan(args: argparse.Namespace) -> int:
    import dataclasses

    from coordinator import planner
    from coordinator.experiment import load_experiment
    from coordinator.tables import ExperimentError
    from mechanisms.planning import McmcPlan
    from mechanisms.planning_blocked import BlockedPlan

    try:
        exp = load_experiment(args.plan)
    except ExperimentError as exc:
        print(f"confar privacy plan: {exc}", file=sys.stderr)
        return 2
    target = exp.budget_target
    if target is None:
        print(
            "confar privacy plan: the experiment has no [privacy] target_epsilon (a planned run: penalty "
            "with sd, proposal = 'laplace', [warm_start])",
            file=sys.stderr,
        )
        return 2
    try:
        exp, pilot = planner.with_pilot(exp, exp.model())
        assert pilot is not None
        model, lap = pilot.model, pilot.laplace  # the pilot's model: in the warm start's ellipsoid, if any
        targets = [dataclasses.replace(target, epsilon=e) for e in [target.epsilon, *(args.epsilon or [])]]
        plans = [
            (t.epsilon, planner.any_plan(dataclasses.replace(exp, budget_target=t), model, lap))
            for t in targets
        ]
    except planner.PlanRefused as exc:
        print(f"confar privacy plan: {exc}", file=sys.stderr)
        return 2
    n = exp.warm_start.n_records if exp.warm_start else sum(planner.pilot_sizes(exp))
    print(
        f"offline plan for {args.plan} ({exp.m} registries, {n} records; pilot: the exact Laplace "
        f"approximation of {pilot.text}, standing in for the posterior; the registries charge what each "
        "decision really is)"
    )
    code = 0
    for eps, p in plans:
        if isinstance(p, McmcPlan) and p.warm_alone:  # a plan never states a spend above its target
            acc = p.accounting
            print(
                f"  eps = {eps:g}: REFUSED: the warm start alone (mu = {p.mu_warm:.3g}) spends eps = "
                f"{acc.eps(acc.warm(p.mu_warm)):.3g} at delta = {target.delta:g}, above this target"
            )
        else:
            verdict = "usable" if p.ess >= target.min_ess else f"REFUSED (min_ess = {target.min_ess:g})"
            print(f"  eps = {eps:g}: {p.text()} -> {verdict}")
            print(f"    {p.floor_line()}")
        if eps == target.epsilon and p.ess < target.min_ess:
            code = 1
    p = plans[0][1]
    advice = planner.cap_advice(exp, model, lap, p)
    if advice is not None:
        print(f"  WARNING: {advice}")
    better_mu = planner.warm_mu_advice(exp, model, lap, p)  # p: the plan of the file's own mu
    if better_mu is not None:
        print(f"  {better_mu}")
    if isinstance(p, BlockedPlan):  # what min_ess needs, from the plan's own simulated runs
        try:
            planner.check_usable(exp, p, "the plan")
        except planner.PlanRefused as exc:
            print(f"  {exc}")
        return code
    for ess in (100.0, 400.0):  # as a planned run (with its margin) needs
        print(f"  an ESS of {ess:.0f} needs eps = {p.eps_for_ess(ess):.3g} at delta = {target.delta:g}")
        print(f"    {p.floor_line(ess)}")
    return code


def _plan(args: argparse.Namespace) -> int:
    if _is_experiment(args.plan):
        return _offline_plan(args)
    from coordinator.privacy import (
        PlanFileError,
        format_plan,
        load_plan,
        plan,
    )  # mechanisms.privacy is slow to import

    try:
        pf = load_plan(args.plan, need_session=True)
        answers = plan(pf)
    except PlanFileError as exc:
        print(f"confar privacy plan: {exc}", file=sys.stderr)
        return 2
    text, bad = format_plan(pf, answers)
    print(text)
    if bad:
        print(
            f"confar privacy plan: {bad} of {len(answers)} parties would refuse this session", file=sys.stderr
        )
        return 1
    return 0


def _report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "plan", type=Path, help="PLAN.toml with [coordinator] and [[parties]] (see coordinator.privacy)"
    )
    p.add_argument("--plot", type=Path, metavar="DIR", help="write <identity>-tradeoff.png per party to DIR")
    p.add_argument(
        "--delta",
        type=float,
        default=1e-5,
        help="delta for eps at delta when a party's budget is a GDP filter (default 1e-5)",
    )


def _report(args: argparse.Namespace) -> int:
    from coordinator.privacy import (  # mechanisms.privacy is slow to import
        PlanFileError,
        load_plan,
        plot_spends,
        report,
    )
    from coordinator.privacy_statement import format_report

    if not 0 < args.delta < 1:
        print("confar privacy report: --delta must lie in (0, 1)", file=sys.stderr)
        return 2
    try:
        pf = load_plan(args.plan, need_session=False)
        answers = report(pf)
    except PlanFileError as exc:
        print(f"confar privacy report: {exc}", file=sys.stderr)
        return 2
    text, spends, bad = format_report(pf, answers, args.delta)
    print(text)
    if args.plot is not None:
        for path in plot_spends(pf, spends, args.plot):
            print(f"wrote {path}")
    if bad:
        print(f"confar privacy report: {bad} of {len(answers)} parties could not be asked", file=sys.stderr)
        return 1
    return 0


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("audit", type=Path, help="AUDIT.toml (schema in simulations/privacy_audit/config.py)")
    p.add_argument("--out", type=Path, required=True, help="folder for the JSON and the plot")
    p.add_argument("--no-daemons", action="store_true", help="skip the confirmation run over real daemons")


def _audit(args: argparse.Namespace) -> int:
    engine = service("privacy-audit")
    return int(engine.run(args))


SUBCOMMANDS: list[tuple[str, Target]] = [
    (
        "plan",
        Command(
            "dry run: each party's projected privacy spend for the session in PLAN.toml (touches no data)",
            _plan_arguments,
            _plan,
        ),
    ),
    (
        "report",
        Command(
            "print (and plot) each party's privacy ledger: events, GDP mu, eps at delta, remaining budget",
            _report_arguments,
            _report,
        ),
    ),
    (
        "audit",
        Command(
            "membership-inference audit of a stated privacy guarantee on the real protocol (AUDIT.toml)",
            _audit_arguments,
            _audit,
        ),
    ),
]
