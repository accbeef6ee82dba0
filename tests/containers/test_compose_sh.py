"""docker/compose.sh picks its Compose client: the one MBDS_COMPOSE names, or else v2's
plugin, or else docker-compose; a named client that does not run is an error that says
so, before any Compose command runs. Needs no Docker: the clients here are stand-ins."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.containers.stack import COMPOSE_SH


def _stand_in(bin_dir: Path, name: str, log: Path, code: int = 0) -> None:
    """A fake client that records its arguments and exits with `code`."""
    script = bin_dir / name
    script.write_text(f"#!/bin/sh\necho \"{name} $*\" >> {log}\nexit {code}\n")
    script.chmod(0o755)


def _run(bin_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(COMPOSE_SH), *args], capture_output=True, text=True,
                          timeout=60, env={"PATH": f"{bin_dir}:/usr/bin:/bin",
                                           "HOME": os.environ.get("HOME", "/root"), **env})


def test_a_named_client_is_used_and_up_runs_down_first(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    _stand_in(tmp_path, "docker", log)
    _stand_in(tmp_path, "docker-compose", log)
    p = _run(tmp_path, "-p", "x", "up", "-d", MBDS_COMPOSE="docker-compose")
    assert p.returncode == 0, p.stderr
    assert log.read_text().splitlines() == [
        "docker-compose version", "docker-compose -p x down --remove-orphans",
        "docker-compose -p x up -d"]
    log.unlink()
    p = _run(tmp_path, "ps", MBDS_COMPOSE="docker compose")
    assert p.returncode == 0, p.stderr
    assert log.read_text().splitlines() == ["docker compose version", "docker compose ps"]


def test_a_named_client_that_does_not_run_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    _stand_in(tmp_path, "docker-compose", log)
    p = _run(tmp_path, "up", "-d", MBDS_COMPOSE="nonesuch")
    assert p.returncode == 1
    assert "MBDS_COMPOSE='nonesuch' does not run ('nonesuch version' failed)" in p.stderr
    assert "up" not in (log.read_text() if log.exists() else "")


def test_without_a_name_v2_comes_first_then_docker_compose(tmp_path: Path) -> None:
    log = tmp_path / "calls"
    _stand_in(tmp_path, "docker", log)
    _stand_in(tmp_path, "docker-compose", log)
    assert _run(tmp_path, "ps").returncode == 0
    assert log.read_text().splitlines() == ["docker compose version", "docker compose ps"]
    log.unlink()
    _stand_in(tmp_path, "docker", log, code=1)          # no v2 plugin
    assert _run(tmp_path, "ps").returncode == 0
    assert log.read_text().splitlines() == ["docker compose version", "docker-compose ps"]
