"""A compose stack with the same interface as LocalCluster, for `mbds bench … --compose`.

Each backend container gets its CPU budget from compose (`BACKEND_CPUS`), so a
backend behaves like its own machine. Every configuration gets its own
project and volumes, deleted afterwards (`down -v`).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from mbds import owned
from mbds.client import Client, ClientError

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker" / "compose.sh"


class ComposeCluster:
    def __init__(self, backends: int, *, internal_timing: bool = True,
                 backend_cpus: float | None = None, start_timeout: float = 180.0) -> None:
        self.n = backends
        self.project = f"mbds_bench_{uuid.uuid4().hex[:8]}"
        # Host port 0: the engine binds free ports; the controller's is read back at start.
        self.env = {**os.environ, "MBDS_MIN_BACKENDS": str(backends),
                    "BACKEND_CPUS": str(backend_cpus or 0.5),
                    "MBDS_INTERNAL_TIMING": "on" if internal_timing else "off",
                    "MBDS_PORT": "0", "PROMETHEUS_PORT": "0"}
        self.start_timeout = start_timeout
        self.address = ""
        self.ca: Path | None = None       # the stack's CA, once started
        self._owned = -1                  # its key in mbds.owned, once started

    def _compose(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(COMPOSE), "-p", self.project, *args], env=self.env,
                              capture_output=True, text=True, timeout=600, check=False)

    def start(self) -> str:
        with owned.starting() as record:    # `mbds bench`'s supervisor takes it down too
            self._owned = record(self.stop)
        r = self._compose("up", "-d", "--scale", f"backend={self.n}")
        if r.returncode != 0:
            self.stop()
            raise RuntimeError(f"compose up failed:\n{r.stdout}\n{r.stderr}")
        try:
            owned.check()                   # told to stop while it came up?
        except owned.Stopping:
            self.stop()
            raise
        port = self._compose("port", "controller", "50051")
        if port.returncode != 0:
            self.stop()
            raise RuntimeError(f"no published controller port:\n{port.stderr}")
        self.address = port.stdout.strip().splitlines()[0]
        self.ca = self._fetch_ca()
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                with Client(self.address, timeout=5, ca=self.ca) as c:
                    s = c.status()
                if len(s.backends) == self.n and all(b.reachable for b in s.backends):
                    return self.address
            except ClientError:
                pass
            if time.monotonic() > deadline:
                logs = self._compose("logs", "--tail", "50").stdout
                self.stop()
                raise RuntimeError(f"the stack did not become ready:\n{logs}")
            time.sleep(1)

    def _fetch_ca(self) -> Path:
        """The stack's CA, copied out of its `certs` volume: clients on the host check the
        controller's TLS certificate with it."""
        out = subprocess.run([str(COMPOSE), "-p", self.project, "exec", "-T", "controller",
                              "cat", "/certs/ca.pem"], env=self.env, capture_output=True,
                             timeout=120, check=False)
        if out.returncode != 0 or not out.stdout.startswith(b"-----BEGIN"):
            self.stop()
            raise RuntimeError(f"cannot read the stack's CA: {out.stderr[-500:]!r}")
        self._ca_dir = tempfile.TemporaryDirectory(prefix="mbds-ca-")
        path = Path(self._ca_dir.name) / "ca.pem"
        path.write_bytes(out.stdout)
        return path

    def stop(self) -> None:
        self._compose("down", "-v", "--remove-orphans")
        owned.disown(self._owned)
