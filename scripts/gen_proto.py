"""Regenerate mbds/proto/*_pb2*.py from proto/*.proto.

Usage: python scripts/gen_proto.py [OUT_DIR]   (default: the repository root)
The generated code is committed; tests/test_proto_current.py regenerates it into
a temporary directory and fails when the committed copy is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent


def generate(out_dir: Path) -> None:
    (out_dir / "mbds" / "proto").mkdir(parents=True, exist_ok=True)
    for proto in sorted((ROOT / "proto").glob("*.proto")):
        # Map proto/ onto mbds/proto/ so generated imports read `from mbds.proto import ...`.
        rc = protoc.main([
            "protoc", f"-Imbds/proto={ROOT / 'proto'}",
            f"--python_out={out_dir}", f"--pyi_out={out_dir}", f"--grpc_python_out={out_dir}",
            f"mbds/proto/{proto.name}",
        ])
        if rc != 0:
            raise SystemExit(f"protoc failed on {proto}")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
