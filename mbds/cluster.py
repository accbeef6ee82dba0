"""A local cluster of real processes on loopback: N backends and one controller.

Used by `mbds up` (the embedded default, no Docker) and by the end-to-end
tests, which drive the same code path a user does: separate processes
talking gRPC, each backend with its own SQLite file.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import site
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from mbds import owned
from mbds.service import OWNED


def _same_code() -> dict[str, str]:
    """Where a started service imports `mbds` from: where this process did. With `-P`
    its working directory is not on its path (a checkout there would otherwise run in
    its place), and a package outside site-packages (a checkout, an editable install)
    goes first on PYTHONPATH."""
    root = str(Path(__file__).resolve().parent.parent)
    if root in {*site.getsitepackages(), site.getusersitepackages()}:
        return {}
    rest = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": root + (os.pathsep + rest if rest else "")}


# In a started process's environment (Linux): the pid of the process that started it,
# with which it is to end (`end_with_launcher`).
LAUNCHER = "MBDS_LAUNCHER"
PR_SET_PDEATHSIG = 1            # <linux/prctl.h>


def end_with_launcher() -> None:
    """First thing in a process a LocalCluster started (LAUNCHER in its environment, on
    Linux): the kernel sends it SIGTERM when its launcher ends, whatever ends it — a
    SIGKILL of `mbds up` included, which leaves it no chance to stop its processes — so
    no server runs on with nobody to stop it. Asked for here, after exec, rather than
    in a `preexec_fn`, which would run Python between fork and exec in a process with
    gRPC's threads; a launcher that died before this is seen by this process having
    another parent, and it ends at once. The signal comes when the
    *thread* that started the process ends: `mbds up` starts them from its main thread,
    `mbds bench` from the one that runs the benchmark and stops them."""
    launcher = os.environ.pop(LAUNCHER, None)   # not passed on to a process of its own
    if launcher is None or not sys.platform.startswith("linux"):
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != int(launcher):
        sys.exit(f"the process that started this one (pid {launcher}) has ended")


LISTENING = re.compile(r"listening on (\S+)")
METRICS = re.compile(r"metrics on (http://\S+)")   # what `mbds backend|controller` print


class ProcessFailed(RuntimeError):
    pass


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGTERM and SIGINT wait until the block ends, then take effect.

    A handler that raises (Ctrl-C is KeyboardInterrupt; `mbds up` raises it for
    SIGTERM too while starting) can fire between a child's fork and the line that
    records it, and the child would run on with nobody to stop it. Only the main
    thread runs handlers; elsewhere the block runs as it is (and `mbds bench`, whose
    benchmark runs in a thread of its own, stops what `mbds.owned` records).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    old = {s: h for s, h in old.items() if h is not None}   # None: not set from Python
    for s in old:
        signal.signal(s, lambda n, _f: held.append(n))
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if held:
            signal.raise_signal(held[0])


class Proc:
    """One child process whose output is kept (the tail is shown if it fails)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str] | None = None,
                 prefix: Sequence[str] = ()) -> None:
        self.name = name
        self.args = args
        self.tail: deque[str] = deque(maxlen=200)
        self.address: str | None = None
        self.metrics_url = ""           # its /metrics, printed before it listens
        self._ready = threading.Event()
        # It ends with this process (end_with_launcher), unless a prefix's process
        # stands between them.
        launcher = {} if prefix else {LAUNCHER: str(os.getpid())}
        with owned.starting() as record:    # a supervisor's stop_all stops it too
            self.popen = subprocess.Popen(
                [*prefix, sys.executable, "-P", "-m", "mbds", *args], stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True,    # Ctrl-C is left to `stop`
                env={**os.environ, **_same_code(), **(env or {}), OWNED: "1", **launcher})
            self._owned = record(self.stop)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.tail.append(line.rstrip())
            if (url := METRICS.search(line)) and not self.metrics_url:
                self.metrics_url = url.group(1)
            m = LISTENING.search(line)
            if m and self.address is None:
                self.address = m.group(1)
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout: float) -> str:
        ended = self._ready.wait(timeout)
        if ended and self.address is not None:
            return self.address
        code = None
        if ended:                  # its output ended before it listened: it is exiting
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.popen.wait(5)
        why = f"exited with code {code}" if code is not None else \
            f"did not start within {timeout:g}s"
        raise ProcessFailed(f"{self.name} {why}:\n" + "\n".join(self.tail))

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def stop(self, timeout: float = 15.0) -> int:
        self.signal(signal.SIGTERM)
        try:
            code = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            code = self.popen.wait()
        owned.disown(self._owned)
        return code

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait()
        owned.disown(self._owned)


class LocalCluster:
    """`backends` processes (data in data_dir/bK) plus a controller on `port`."""

    def __init__(self, data_dir: Path, backends: int, *, port: int = 0,
                 internal_timing: bool = True, synchronous: str = "NORMAL",
                 metrics_port: int | None = None, timeout: float = 60.0,
                 backend_cpus: float | None = None, in_memory: bool = False,
                 split_search_from: int = 1, tls: bool = True, client_tls: bool = False,
                 tokens: Path | None = None, prefix: Sequence[str] = (),
                 start_timeout: float = 30.0) -> None:
        self.split_search_from = split_search_from
        # A command every server process runs under (e.g. valgrind, which also needs a
        # longer start_timeout): `loadgen/instructions.py`.
        self.prefix = list(prefix)
        self.start_timeout = start_timeout
        # Internal links use mutual TLS with certificates made in data_dir/tls; the
        # client port is plaintext on loopback unless client_tls or tokens ask for TLS.
        self.tls_dir = Path(data_dir) / "tls" if tls else None
        self.client_tls = client_tls or tokens is not None
        self.tokens = tokens
        self.backend_cpus = backend_cpus
        self.in_memory = in_memory
        self.data_dir = Path(data_dir)
        self.n = backends
        self.port = port
        self.internal_timing = internal_timing
        self.synchronous = synchronous
        self.metrics_port = metrics_port
        self.timeout = timeout
        self.backends: list[Proc] = []
        self.controller: Proc | None = None
        self.cgroups: list[Path] = []          # CPU budgets made for the backends
        self.address = ""

    @property
    def ca(self) -> Path | None:
        """What a client checks the controller's certificate with (None: plaintext)."""
        return self.tls_dir / "ca.pem" if self.tls_dir and self.client_tls else None

    def _metrics_port(self, offset: int) -> int:
        """Controller on M, backend K on M + 1 + K; with M = 0 each process binds a port
        of its own choosing, which the controller's Status reports."""
        assert self.metrics_port is not None
        return self.metrics_port + offset if self.metrics_port else 0

    def check_data_dir(self) -> None:
        existing = sorted(p.name for p in self.data_dir.glob("b*") if (p / "backend.db").exists())
        extra = [name for name in existing if int(name[1:]) >= self.n]
        if extra:
            raise ProcessFailed(
                f"{self.data_dir} holds data of {len(existing)} backends ({', '.join(existing)});"
                f" start with --backends {len(existing)} or use another --data-dir, "
                "or their records would be missing")

    def start_backend(self, i: int, port: int = 0, env: dict[str, str] | None = None) -> Proc:
        args = ["backend", "--listen", f"127.0.0.1:{port}", "--data-dir",
                str(self.data_dir / f"b{i}"), "--synchronous", self.synchronous]
        if self.metrics_port is not None:
            args += ["--metrics-port", str(self._metrics_port(1 + i))]
        if self.in_memory:
            args.append("--in-memory")
        if self.tls_dir is not None:
            args += ["--tls-dir", str(self.tls_dir)]
        proc: Proc | None = None
        try:
            with signals_held():      # the child is recorded before SIGTERM can unwind
                proc = Proc(f"backend b{i}", args, env, self.prefix)
            proc.wait_ready(self.start_timeout)
            if self.backend_cpus:
                from mbds.cpulimit import apply
                self.cgroups.append(apply(proc.popen.pid, self.backend_cpus,
                                          f"{self.data_dir.name}-b{i}"))
        except BaseException:   # not started, or interrupted (SIGTERM, Ctrl-C): stop it
            if proc is not None:
                proc.stop()
            raise
        return proc

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.check_data_dir()
        if self.tls_dir is not None:
            from mbds.tls import make
            make(self.tls_dir)
        try:
            self.backends = []
            for i in range(self.n):   # one by one: a failed start stops those already up
                self.backends.append(self.start_backend(i))
            self.start_controller()
        except BaseException:     # a failed start, or SIGTERM / Ctrl-C while starting
            self.stop()
            raise
        return self.address

    def start_controller(self, port: int | None = None, env: dict[str, str] | None = None
                         ) -> None:
        port = self.port if port is None else port
        args = ["controller", "--listen", f"127.0.0.1:{port}", "--backends",
                ",".join(p.address or "" for p in self.backends),
                "--internal-timing", "on" if self.internal_timing else "off",
                "--timeout", str(self.timeout),
                "--split-search-from", str(self.split_search_from),
                "--data-dir", str(self.data_dir / "controller"),
                "--synchronous", self.synchronous]
        if self.metrics_port is not None:
            args += ["--metrics-port", str(self._metrics_port(0))]
        if self.tls_dir is not None:
            args += ["--tls-dir", str(self.tls_dir)]
            if not self.client_tls:
                args.append("--client-plaintext")
        if self.tokens is not None:
            args += ["--tokens", str(self.tokens)]
        with signals_held():          # start() stops it if a signal comes after this
            self.controller = Proc("controller", args, env, self.prefix)
        self.address = self.controller.wait_ready(2 * self.start_timeout)

    def restart_backend(self, i: int, env: dict[str, str] | None = None) -> None:
        """Start backend i again on its old port (its data directory is kept), with `env`
        added to its environment (e.g. MBDS_FAULTS, mbds/faults.py). The old process
        must have ended: it holds the directory and the port."""
        _ended_already(self.backends[i])

        def start(port: int) -> None:
            self.backends[i] = self.start_backend(i, port, env)
        _on_old_port(start, self.backends[i].address or "")

    def restart_controller(self, env: dict[str, str] | None = None) -> None:
        """Start the controller again on its old port (its decision log is kept), with
        `env` added to its environment. The old process must have ended."""
        if self.controller is not None:
            _ended_already(self.controller)
        _on_old_port(lambda port: self.start_controller(port, env), self.address)

    def stop(self) -> None:
        # The controller first: it finishes its answers in flight while every backend
        # still serves them. Then the backends, all at once.
        if self.controller is not None:
            self.controller.stop()
        for p in self.backends:
            p.signal(signal.SIGTERM)
        for p in self.backends:
            p.stop()
        from mbds.cpulimit import remove
        for group in self.cgroups:
            remove(group)

    def logs(self) -> str:
        procs = ([self.controller] if self.controller else []) + self.backends
        return "\n".join(f"--- {p.name}\n" + "\n".join(p.tail) for p in procs)


def _ended_already(proc: Proc) -> None:
    if proc.popen.poll() is None:
        raise ProcessFailed(f"{proc.name} is still running: stop or kill it before "
                            "starting it again")


def _on_old_port(start: Callable[[int], None], address: str) -> None:
    """Start a process again on the port of `address` (which may linger briefly)."""
    port = int(address.rsplit(":", 1)[1])
    deadline = time.monotonic() + 10
    while True:
        try:
            start(port)
            return
        except ProcessFailed:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
