"""``provenance.json`` of a run's outputs: the caller's provenance (config text, seeds, party identities,
session and run ids, timestamps) plus what this process can tell: package versions, Python, platform, the git
commit when the package sits in a git checkout; and the JSON encoding every output document uses."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import importlib.metadata
import json
import math
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from coordinator.outputs.privacy_docs import party_identity
from coordinator.outputs.result import RunResult

VERSIONED_PACKAGES = (
    "confidential-ar",
    "numpy",
    "scipy",
    "arviz",
    "xarray",
    "pandas",
    "h5netcdf",
    "h5py",
    "matplotlib",
    "dp-accounting",
    "grpcio",
    "protobuf",
    "cryptography",
)


def package_versions(names: Sequence[str] = VERSIONED_PACKAGES) -> dict[str, str | None]:
    """Installed versions (``importlib.metadata``); ``None`` for a package that is not installed."""
    out: dict[str, str | None] = {}
    for nm in names:
        try:
            out[nm] = importlib.metadata.version(nm)
        except importlib.metadata.PackageNotFoundError:
            out[nm] = None
    return out


def git_commit(start: Path | None = None) -> dict[str, str] | None:
    """The commit of the git checkout holding this package, read from ``.git`` (no git command is run)."""
    here = (start or Path(__file__)).resolve()
    for root in [here, *here.parents]:
        dotgit = root / ".git"
        if dotgit.is_file():  # worktree / submodule: "gitdir: <path>"
            text = dotgit.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            gitdir = (root / text.split(":", 1)[1].strip()).resolve()
        elif dotgit.is_dir():
            gitdir = dotgit
        else:
            continue
        try:
            head = (gitdir / "HEAD").read_text(encoding="utf-8").strip()
            if not head.startswith("ref:"):
                return {"commit": head, "ref": "(detached)", "root": str(root)}
            ref = head.split(":", 1)[1].strip()
            common = gitdir
            if (gitdir / "commondir").is_file():
                common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
            for base in (gitdir, common):
                if (base / ref).is_file():
                    return {
                        "commit": (base / ref).read_text(encoding="utf-8").strip(),
                        "ref": ref,
                        "root": str(root),
                    }
            packed = common / "packed-refs"
            if packed.is_file():
                for line in packed.read_text(encoding="utf-8").splitlines():
                    parts = line.split()
                    if len(parts) == 2 and parts[1] == ref:
                        return {"commit": parts[0], "ref": ref, "root": str(root)}
        except OSError:
            return None
        return None
    return None


def jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, _dt.datetime | _dt.date):
        return v.isoformat()
    if isinstance(v, np.ndarray):
        return [jsonable(x) for x in v.tolist()]
    if isinstance(v, np.generic):
        return jsonable(v.item())
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, Mapping):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set | frozenset):
        return [jsonable(x) for x in v]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return jsonable(dataclasses.asdict(v))
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return str(v)


def json_bytes(doc: Any) -> bytes:
    return (json.dumps(jsonable(doc), indent=1, allow_nan=False, sort_keys=False) + "\n").encode("utf-8")


def build_provenance(result: RunResult, files: Mapping[str, str]) -> dict[str, Any]:
    """The caller's provenance plus what this process can tell: versions, Python, platform, git, time."""
    prov: dict[str, Any] = dict(result.provenance)
    if "parties" not in prov and result.privacy_reports:
        prov["parties"] = {
            pid: party_identity(pid, rep, result) for pid, rep in result.privacy_reports.items()
        }
    prov["outputs"] = {
        "written_at": _dt.datetime.now(_dt.UTC).isoformat(),
        "chains": result.chains,
        "draws_per_chain": result.n_draws,
        "warmup_per_chain": result.warmup,
        "param_names": result.param_names,
        "sample_stats": sorted(result.sample_stats),
        "reference": None if result.reference is None else result.reference.label,
        "files_sha256": dict(files),
    }
    prov["software"] = {
        "python": sys.version,
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": package_versions(),
        "git": git_commit(),
    }
    return prov
