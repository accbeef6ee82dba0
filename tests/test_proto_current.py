"""The committed generated code must match proto/*.proto."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), str(tmp_path)],
                   check=True)
    for generated in sorted((tmp_path / "mbds" / "proto").glob("*_pb2*")):
        committed = ROOT / "mbds" / "proto" / generated.name
        assert committed.exists(), f"{committed} is missing: run scripts/gen_proto.py"
        assert committed.read_text() == generated.read_text(), (
            f"{committed.name} is stale: run python scripts/gen_proto.py")
