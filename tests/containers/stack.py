"""A compose stack of docker-compose.yml for the container tests, driven as users type
it (`docker-compose up -d --scale backend=N`) or through docker/compose.sh, and the
commands around it."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_IMAGES = ROOT / "docker" / "build-images.sh"
COMPOSE_SH = ROOT / "docker" / "compose.sh"
CONTROLLER = "localhost:50051"       # the controller, seen from inside its own container
STARTUP_S = 180                      # images exist: a stack is healthy well within this
CONTROLLER_DEADLINE_S = 60           # `mbds controller --timeout` default
CPU_LIMIT_NANO = 500_000_000         # BACKEND_CPUS default 0.5
# The paper's Table 2 (docs/spec.md §5): clusters examined and records retrieved, requests 1-9.
PAPER_TABLE2 = {1: (2, 2), 2: (7, 250), 3: (13, 500), 4: (24, 1000), 5: (9, 400),
                6: (19, 800), 7: (10, 201), 8: (15, 401), 9: (19, 402)}


def run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 300,
        check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}\n"
                    f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


V2, V1 = "docker compose", "docker-compose"     # Compose v2 (the plugin) and 1.29


def compose_clients() -> list[str]:
    """The Compose clients installed here, v2 first (the one compose.sh prefers)."""
    found = []
    for client in (V2, V1):
        if shutil.which(client.split()[0]) is not None and subprocess.run(
                [*client.split(), "version"], capture_output=True, timeout=60).returncode == 0:
            found.append(client)
    return found


def docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "docker is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60)
    if info.returncode != 0:
        return f"the Docker daemon is not reachable: {info.stderr.strip()[-300:]}"
    if not compose_clients():
        return "no Compose client ('docker compose' or 'docker-compose')"
    return None


class Stack:
    """One compose project of docker-compose.yml, driven through docker/compose.sh with
    one Compose client (default: the one compose.sh picks by itself)."""

    def __init__(self, client: str | None = None) -> None:
        self.project = f"mbds_test_{secrets.token_hex(4)}"
        self.client = client or compose_clients()[0]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("COMPOSE_")
               and k not in ("MBDS_MIN_BACKENDS", "BACKEND_CPUS", "BASE_IMAGE")}
        # Host port 0: the engine binds a free port; `published` reads it back.
        self.env = {**env, "COMPOSE_PROJECT_NAME": self.project, "MBDS_COMPOSE": self.client,
                    "MBDS_PORT": "0", "PROMETHEUS_PORT": "0"}

    def published(self, service: str, port: int) -> int:
        """The loopback port the engine bound for a service's container port."""
        [container] = self.containers(service)
        out = run(["docker", "port", container, f"{port}/tcp"]).stdout.split()
        host, _, bound = out[0].rpartition(":")
        assert host == "127.0.0.1", out
        return int(bound)

    @property
    def mbds_port(self) -> int:
        return self.published("controller", 50051)

    @property
    def prometheus_port(self) -> int:
        return self.published("prometheus", 9090)

    def prometheus(self, path: str, **params: str) -> Any:
        """The `data` of a reply of the stack's Prometheus HTTP API (`/api/v1/<path>`)."""
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            reply = json.load(r)
        assert reply["status"] == "success", reply
        return reply["data"]

    # -- compose and docker --------------------------------------------------
    def compose(self, *args: str, check: bool = True, timeout: float = 300
                ) -> subprocess.CompletedProcess[str]:
        return run([str(COMPOSE_SH), *args], env=self.env, timeout=timeout, check=check)

    def up(self, backends: int) -> None:
        """`compose.sh up` (down, then up) with N backends; wait until all are healthy."""
        self.compose("up", "-d", "--scale", f"backend={backends}")
        self.wait_healthy(backends)

    def plain(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """The Compose client itself, run in the repository as a user would."""
        return run([*self.client.split(), *args], env=self.env, timeout=timeout, cwd=ROOT)

    def plain_up(self, backends: int) -> None:
        """`docker-compose up -d --scale backend=N` with no wrapper and no count given to
        the controller (after `down`, as docker-compose 1.29.2 needs)."""
        self.plain("down", "--remove-orphans")
        self.plain("up", "-d", "--scale", f"backend={backends}")
        self.wait_healthy(backends)

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", check=False)

    def logs(self) -> str:
        p = self.compose("logs", "--no-color", "--tail", "60", check=False, timeout=60)
        return p.stdout + p.stderr

    def containers(self, service: str | None = None, *, all_states: bool = False) -> list[str]:
        cmd = ["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={self.project}"]
        if service:
            cmd += ["--filter", f"label=com.docker.compose.service={service}"]
        if all_states:
            cmd.append("-a")
        return run(cmd).stdout.split()

    @staticmethod
    def inspect(container: str) -> dict[str, Any]:
        return json.loads(run(["docker", "inspect", container]).stdout)[0]

    def wait_healthy(self, backends: int, timeout: float = STARTUP_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            health = {}
            for c in self.containers(all_states=True):
                info = self.inspect(c)
                service = info["Config"]["Labels"]["com.docker.compose.service"]
                state = info["State"].get("Health", {}).get("Status", info["State"]["Status"])
                health.setdefault(service, []).append(state)
            backends_ok = health.get("backend", []).count("healthy") == backends
            if backends_ok and health.get("controller") == ["healthy"] \
                    and health.get("prometheus") == ["running"]:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"stack {self.project} not healthy after {timeout:.0f}s: {health}\n"
                            f"{self.logs()}")
            time.sleep(1)

    def wait_container_healthy(self, container: str, timeout: float = STARTUP_S) -> None:
        deadline = time.monotonic() + timeout
        while (status := self.inspect(container)["State"].get("Health", {}).get("Status")) \
                != "healthy":
            if time.monotonic() > deadline:
                pytest.fail(f"{container} is {status} after {timeout:.0f}s\n{self.logs()}")
            time.sleep(1)

    @property
    def controller(self) -> str:
        [c] = self.containers("controller")
        return c

    # -- the mbds client, run inside the controller container -----------------
    def mbds(self, command: list[str], *args: str, check: bool = True, timeout: float = 300
             ) -> subprocess.CompletedProcess[str]:
        return run(["docker", "exec", self.controller, "mbds", *command, "--controller",
                    CONTROLLER, *args], timeout=timeout, check=check)

    def exec_json(self, abdl: str) -> list[dict[str, Any]]:
        """`mbds exec --json`: one result object per request."""
        out = self.mbds(["exec"], "--json", abdl).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def count(self, query: str) -> int:
        [result] = self.exec_json(f"RETRIEVE {query} (COUNT(INTE1))")
        [record] = result["records"]
        [value] = record.values()
        return value

    def backend_names(self) -> list[str]:
        """Every backend of the controller, as listed in a whole-file retrieve's stats."""
        [result] = self.exec_json("RETRIEVE (FILE = PAPER) (COUNT(INTE1))")
        return [b["backend"] for b in result["stats"]["backends"]]


def backend_name(container: str) -> str:
    """The slot name the backend claimed (its log says `backend bK listening on ...`)."""
    logs = run(["docker", "logs", container]).stdout
    names = re.findall(r"^backend (\S+) listening", logs, re.M)
    assert names, f"no 'backend ... listening' line in the log of {container}:\n{logs[-2000:]}"
    return names[-1]
