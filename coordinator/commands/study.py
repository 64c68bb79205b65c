"""``confar study ...``: the study a registry's access committee approves (issue 37).

* ``confar study request EXPERIMENT.toml --out study.json``: the experiment's study request
  (``coordinator.study_request``: from its ``[study]`` table, model, sampler, reveal and ``[privacy]``
  target), written as a canonical, human-readable JSON document with its digest (``proto.study``). Each
  registry's custodian reviews it (``confar-party study show study.json``) and approves it
  (``confar-party study approve``); ``confar run`` then sends the same document with every session.
  Nothing is contacted; the file is written durably.

Exit codes: 0 written; 2 a bad experiment file or argument (the message names the key).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coordinator.commands import Command, Target
from coordinator.tables import ExperimentError
from proto.files import write_durable
from proto.study import file_text

HELP = "study requests for the registries' access committees (issue 37)"


def _request_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, help="the experiment file, with a [study] table")
    p.add_argument("--out", required=True, type=Path, help="where to write the study document (JSON)")


def _request(args: argparse.Namespace) -> int:
    from coordinator.experiment import load_experiment

    try:
        exp = load_experiment(args.config)
    except ExperimentError as exc:
        print(f"confar study request: {exc}", file=sys.stderr)
        return 2
    if exp.study is None:
        print(
            f"confar study request: {args.config}: study: missing table: give [study] title, reference "
            "and expires (coordinator/study_request.py)",
            file=sys.stderr,
        )
        return 2
    study = exp.study.study()
    try:
        write_durable(args.out, file_text(study.doc).encode("utf-8"), private=False)
    except OSError as exc:
        print(f"confar study request: cannot write {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    p = study.doc["privacy"]
    print(f"{args.out}: {study.name}")
    print(f"digest {study.digest}")
    print(
        f"asks each of {len(study.registries)} registries for epsilon {p['epsilon']:g} at delta "
        f"{p['delta']:g} ({p['accountant']}, {p['neighbours']}), {study.doc['decisions']['total']} "
        f"decisions, reveal {', '.join(study.reveal_modes)}; send it to each registry's custodian "
        "(confar-party study show / approve)"
    )
    return 0


SUBCOMMANDS: list[tuple[str, Target]] = [
    (
        "request",
        Command("write the experiment's study request (JSON, with its digest)", _request_arguments, _request),
    ),
]
