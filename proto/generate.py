"""Regenerate (or check) the committed Python code for the .proto files in this folder.

The .proto files are the single source of truth of the wire format. Generated modules are committed so
that an installed confar needs no protoc; ``python -m proto.generate --check`` (and the test
tests/proto/test_proto_generated.py) fails when they differ from what the .proto files generate.

Run from anywhere: paths are resolved relative to the repository root, so imports in the generated code
read ``from proto import common_pb2``.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def generated_names() -> list[str]:
    names: list[str] = []
    for p in proto_files():
        stem = p.stem
        names += [f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"]
    return names


def generate(out_root: Path) -> None:
    """Run grpc_tools.protoc with the repository root as include path, writing under out_root/proto."""
    from grpc_tools import protoc  # grpcio-tools is a test/dev dependency only

    (out_root / "proto").mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{ROOT}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *[str(p.relative_to(ROOT)) for p in proto_files()],
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}: {' '.join(args)}")


def differences() -> list[str]:
    """Names of generated files that are missing or differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        diff = []
        for name in generated_names():
            fresh, committed = Path(tmp) / "proto" / name, PROTO_DIR / name
            if not committed.exists() or not filecmp.cmp(fresh, committed, shallow=False):
                diff.append(name)
        return diff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m proto.generate", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 if the committed code is stale")
    args = ap.parse_args(argv)
    if args.check:
        diff = differences()
        if diff:
            print("stale generated code (run: python -m proto.generate): " + ", ".join(diff), file=sys.stderr)
            return 1
        print("generated code matches the .proto files")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        for name in generated_names():
            shutil.copyfile(Path(tmp) / "proto" / name, PROTO_DIR / name)
    print(f"wrote {len(generated_names())} files to {PROTO_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
