"""The custodian's commands (issue 37): ``confar-party study show / approve / revoke / list``.

    confar-party study show study.json [--config party.toml]
    confar-party study approve study.json --config party.toml --max-epsilon E --expires YYYY-MM-DD
                 [--delta D] [--by NAME] [--note TEXT]
    confar-party study revoke DIGEST|study.json --config party.toml --reason TEXT [--by NAME]
    confar-party study list --config party.toml

``show`` prints the study request (``proto.study``) as a reviewer reads it: who asks, which registries, the
model and its public bounds, the sampler, the planned decisions, the reveal mode and security, the ε asked
of each registry with its accountant, neighbour relation and threat model; with ``--config`` also this
registry's approval of it. ``approve`` appends this registry's signed approval with its cap and expiry to
``<state_dir>/approvals.log`` (``parties.approvals``) and one audit line; ``revoke`` appends a revocation. A
running daemon sees either at its next session or step; neither needs a restart. Nothing else changes.

Exit codes: 0 done; 2 a bad file, argument or configuration (the message names it); 1 the approvals file
or state cannot be trusted (the message names the file and line).
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
import math
import sys
from pathlib import Path
from typing import Any

from parties.approvals import (
    APPROVALS_FILE,
    ApprovalError,
    append_record,
    approval_store,
    read_approvals,
    signer_of,
    time_text,
    utc_now,
)
from parties.audit import AuditLog
from parties.config import ConfigError, PartyConfig, load_config
from proto.files import write_durable
from proto.study import Study, StudyError, flatten, read_study_file

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def add_arguments(sub: Any) -> None:
    """The ``study`` command group under ``confar-party``."""
    study = sub.add_parser("study", help="study approvals: show, approve, revoke, list (issue 37)")
    inner = study.add_subparsers(dest="study_command", required=True)
    show = inner.add_parser("show", help="print a study request as a reviewer reads it")
    show.add_argument("file", type=Path, help="the study document (confar study request --out)")
    show.add_argument("--config", help="this registry's party TOML: also say whether it approved the study")
    approve = inner.add_parser("approve", help="approve a study here, with a cap and an expiry")
    approve.add_argument("file", type=Path, help="the study document")
    approve.add_argument("--max-epsilon", type=float, required=True, metavar="E", help="the study's cap")
    approve.add_argument("--expires", required=True, metavar="YYYY-MM-DD", help="last day it holds (UTC)")
    approve.add_argument("--delta", type=float, metavar="D", help="the cap's delta (default: the budget's)")
    approve.add_argument("--note", default="", help="the committee's decision, conditions (kept with it)")
    revoke = inner.add_parser("revoke", help="revoke a study's approval here")
    revoke.add_argument("study", help="the study's digest (at least 8 hex digits) or its document")
    revoke.add_argument("--reason", required=True, help="why (kept with the revocation)")
    lst = inner.add_parser("list", help="this registry's approvals and their status")
    for p in (approve, revoke, lst):
        p.add_argument("--config", required=True, help="this registry's party TOML")
    for p in (approve, revoke):
        p.add_argument("--by", default=None, help="who decides (default: the user running the command)")
    for p in (show, approve, revoke, lst):
        p.add_argument("--insecure", action="store_true", help="the daemon runs without TLS (unsigned)")
    report = sub.add_parser("report", help="what ran on this registry's data: one HTML page (and JSON)")
    report.add_argument("--config", required=True, help="this registry's party TOML")
    report.add_argument("--out", required=True, type=Path, help="the HTML page to write")
    report.add_argument(
        "--json",
        nargs="?",
        type=Path,
        const=True,
        default=None,
        metavar="PATH",
        help="also the machine-readable form (default PATH: --out with .json)",
    )
    report.add_argument("--insecure", action="store_true", help="the daemon runs without TLS")


def report(args: argparse.Namespace) -> int:
    """``confar-party report``: the page (and JSON) from the state folder, read-only (parties.report)."""
    from parties.report import ReportError, collect, render_html, render_json

    try:
        cfg = load_config(args.config, insecure=args.insecure)
    except ConfigError as exc:
        print(f"confar-party: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        doc = collect(cfg)
    except ReportError as exc:
        print(f"confar-party report: {exc}; nothing written", file=sys.stderr)
        return EXIT_FAILURE
    json_path = args.out.with_suffix(".json") if args.json is True else args.json
    try:
        write_durable(args.out, render_html(doc).encode("utf-8"))
        if json_path is not None:
            write_durable(json_path, render_json(doc).encode("utf-8"))
    except OSError as exc:
        print(f"confar-party report: cannot write: {exc}", file=sys.stderr)
        return EXIT_USAGE
    b = doc["budget"]
    print(
        f"{args.out}: {len(doc['runs'])} runs, {len(doc['studies'])} studies, {len(doc['refusals'])} "
        f"refusals, {len(doc['aborts'])} aborted sessions; spent {b['spent']} of {b['limit']} "
        f"({b['unit'] or 'no budget'})" + (f"; JSON {json_path}" if json_path is not None else "")
    )
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    cfg = None
    if args.config is not None:
        try:
            cfg = load_config(args.config, insecure=args.insecure)
        except ConfigError as exc:
            print(f"confar-party: configuration error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    command = args.study_command
    try:
        if command == "show":
            return show(read_study_file(args.file), cfg)
        assert cfg is not None
        if command == "approve":
            return approve(cfg, read_study_file(args.file), args)
        if command == "revoke":
            return revoke(cfg, args)
        return list_approvals(cfg)
    except StudyError as exc:
        print(f"confar-party study {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ApprovalError as exc:
        print(f"confar-party study {command}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


# ---- show ----------------------------------------------------------------------------------------------


def study_lines(study: Study) -> list[str]:
    """The study request as a reviewer reads it."""
    d = study.doc
    s, dec, p = d["sampler"], d["decisions"], d["privacy"]
    model = d["model"]
    lines = [
        f"{study.name}",
        f"  digest        {study.digest}",
        f"  asked until   {study.expires.isoformat()} (each registry's approval has its own expiry)",
        f"  coordinator   {study.coordinator}",
        "  registries    " + ", ".join(f"{pid} {ident}" for pid, ident in study.registries),
        f"  analysis      {study.analysis}: model {model.get('name')} {json.dumps(model.get('params', {}))}",
        f"  sampler       {s.get('kind')}: {s.get('chains')} chains x {s.get('iterations')} iterations "
        f"({s.get('warmup')} warm-up){'; a DP warm start first' if s.get('warm_start') else ''}",
        f"  decisions     {dec['batches']} batches of {dec['batch_size']} = {dec['total']} (planned)",
        f"  reveal        {', '.join(study.reveal_modes)}; security {study.security}; threshold t = "
        f"{study.threshold}",
        "  every session must send this decision plan (its public bounds and noise):",
    ]
    lines += [f"    {k} = {json.dumps(v)}" for k, v in flatten(study.decision_plan).items()]
    if study.set_by_run:
        lines.append("  set by the run from its own DP releases: " + ", ".join(study.set_by_run))
    lines += [
        f"  privacy asked epsilon {p['epsilon']:g} at delta {p['delta']:g} of each registry over the whole "
        f"study ({p['accountant']} accountant, {p['neighbours']} neighbours, colluding {p['colluding']})",
        f"  threat model  {d['threat_model']}",
    ]
    return lines


def show(study: Study, cfg: PartyConfig | None) -> int:
    print("\n".join(study_lines(study)))
    if cfg is not None:
        book = approval_store(cfg).book()
        found = book.get(study.digest)
        here = f"this registry ({cfg.identity})"
        if (cfg.id, cfg.identity) not in study.registries:
            print(f"  {here} is not one of the study's registries")
        elif found is None:
            print(f"  {here}: not approved (confar-party study approve FILE --max-epsilon E --expires DATE)")
        else:
            print(
                f"  {here}: approved {found.at} by {found.by}, cap epsilon {found.max_epsilon:g} at delta "
                f"{found.delta:g}; {found.status()}"
            )
    return EXIT_OK


# ---- approve / revoke / list -----------------------------------------------------------------------------


def _who(args: argparse.Namespace) -> str:
    return args.by or getpass.getuser()


def approve(cfg: PartyConfig, study: Study, args: argparse.Namespace) -> int:
    where = f"study {args.file}"
    if (cfg.id, cfg.identity) not in study.registries:
        names = ", ".join(f"{pid} {ident}" for pid, ident in study.registries)
        print(
            f"confar-party study approve: {where} does not name this registry (party {cfg.id}, "
            f"{cfg.identity}) among its registries ({names}): nothing approved",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if study.coordinator != cfg.coordinator_identity:
        print(
            f"confar-party study approve: {where} is the study of coordinator {study.coordinator!r}, not of "
            f"this registry's coordinator {cfg.coordinator_identity!r} ([coordinator] identity)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    cap = args.max_epsilon
    if not (math.isfinite(cap) and cap > 0):
        print(f"confar-party study approve: --max-epsilon must be a number > 0, got {cap}", file=sys.stderr)
        return EXIT_USAGE
    try:
        expires = dt.date.fromisoformat(args.expires)
    except ValueError:
        print(
            f"confar-party study approve: --expires must be a date YYYY-MM-DD, got {args.expires!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    today = utc_now().date()
    if expires < today:
        print(
            f"confar-party study approve: --expires {expires} is in the past (today is {today}, UTC)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    delta = args.delta if args.delta is not None else (cfg.delta if cfg.delta is not None else study.delta)
    if not 0 < delta < 1:
        print(
            f"confar-party study approve: --delta must lie strictly between 0 and 1, got {delta}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if cfg.epsilon is None and cfg.gdp_mu is None:
        print(
            f"confar-party study approve: {cfg.source}: [budget] has no privacy budget (epsilon and delta, "
            "or gdp_mu): a study's cap is charged by the registry's privacy accountant; configure one first",
            file=sys.stderr,
        )
        return EXIT_USAGE
    who = _who(args)
    at = time_text(utc_now())
    fields = {
        "action": "approve",
        "study": study.digest,
        "doc": study.doc,
        "at": at,
        "by": who,
        "max_epsilon": cap,
        "delta": delta,
        "expires": expires.isoformat(),
        "note": args.note,
    }
    path = cfg.state_dir / APPROVALS_FILE
    _, seq = append_record(path, signer_of(cfg), fields)
    AuditLog(cfg.state_dir / "audit.log").record(
        who=who,
        what="StudyApprove",
        study=study.digest,
        title=study.title,
        reference=study.reference,
        max_epsilon=cap,
        delta=delta,
        expires=expires.isoformat(),
        detail=args.note or None,
    )
    print(
        f"approved {study.name} for this registry ({cfg.identity}): at most epsilon {cap:g} at delta "
        f"{delta:g} charged to its sessions, until the end of {expires.isoformat()} (UTC); record {seq} of "
        f"{path}"
    )
    if cap > study.epsilon:
        print(f"note: the cap is above the epsilon the study asks for ({study.epsilon:g})")
    if cfg.epsilon is not None and cap > cfg.epsilon:
        print(
            f"note: the cap is above this registry's whole budget (epsilon {cfg.epsilon:g}), which binds "
            "first"
        )
    return EXIT_OK


def revoke(cfg: PartyConfig, args: argparse.Namespace) -> int:
    signer = signer_of(cfg)
    path = cfg.state_dir / APPROVALS_FILE
    book = read_approvals(path, signer)
    ref = str(args.study)
    if Path(ref).is_file():
        digests = [read_study_file(Path(ref)).digest]
    else:
        if len(ref) < 8 or any(c not in "0123456789abcdef" for c in ref.lower()):
            print(
                f"confar-party study revoke: {ref!r} is neither a study file nor a digest (>= 8 hex digits)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        digests = [d for d in book.approvals if d.startswith(ref.lower())]
    found = [book.approvals[d] for d in digests if d in book.approvals]
    if len(found) != 1:
        what = "no study approved here" if not found else f"{len(found)} studies"
        print(f"confar-party study revoke: {ref!r} matches {what} ({path})", file=sys.stderr)
        return EXIT_USAGE
    a = found[0]
    if a.revoked is not None:
        print(f"confar-party study revoke: {a.study.name} is already revoked ({a.status()})", file=sys.stderr)
        return EXIT_USAGE
    who = _who(args)
    fields = {
        "action": "revoke",
        "study": a.study.digest,
        "at": time_text(utc_now()),
        "by": who,
        "reason": args.reason,
    }
    _, seq = append_record(path, signer, fields)
    AuditLog(cfg.state_dir / "audit.log").record(
        who=who, what="StudyRevoke", study=a.study.digest, title=a.study.title, detail=args.reason
    )
    print(f"revoked {a.study.name} at this registry ({cfg.identity}); record {seq} of {path}")
    return EXIT_OK


def list_approvals(cfg: PartyConfig) -> int:
    book = approval_store(cfg).book()
    if not book.approvals:
        print(f"no study approved at this registry ({cfg.state_dir / APPROVALS_FILE})")
    for a in book.approvals.values():
        print(
            f"{a.study.name}: cap epsilon {a.max_epsilon:g} at delta {a.delta:g}, approved {a.at} by {a.by}; "
            f"{a.status()}"
        )
    return EXIT_OK
