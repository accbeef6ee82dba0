"""The committed generated code must match proto/*.proto."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), str(tmp_path)],
                   check=True)
    generated = {p.name: p for p in (tmp_path / "mbds" / "proto").glob("*_pb2*")}
    committed = {p.name for p in (ROOT / "mbds" / "proto").glob("*_pb2*")}
    # Every proto gives its messages, their stubs and the gRPC services.
    expected = {f"{p.stem}_{kind}" for p in (ROOT / "proto").glob("*.proto")
                for kind in ("pb2.py", "pb2.pyi", "pb2_grpc.py")}
    assert expected and set(generated) == expected, sorted(generated)
    assert committed == expected, f"committed {sorted(committed)}: run scripts/gen_proto.py"
    for name, path in sorted(generated.items()):
        assert (ROOT / "mbds" / "proto" / name).read_text() == path.read_text(), (
            f"{name} is stale: run python scripts/gen_proto.py")
