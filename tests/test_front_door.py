"""What a newcomer meets first: scripts/run.sh beside a cluster of their own, `mbds up`
when one of its processes dies or its port is taken, the shell's multi-line input, and
the help texts."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import psutil
import pytest

from loadgen import paper_db as P
from mbds.client import Client
from tests.conftest import CENSUS_YAML
from tests.lines import OutputLines

ROOT = Path(__file__).resolve().parent.parent
# A line gRPC's own logger writes (severity, date, time, thread, file:line]).
GRPC_LOG_LINE = re.compile(r"^[EWID]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]", re.M)


def mbds(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`mbds ARGS` as a command, with none of the caller's MBDS_* settings but `env`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MBDS_")}
    return subprocess.run([sys.executable, "-m", "mbds", *args], capture_output=True,
                          text=True, timeout=120, env={**clean, **(env or {})})


class Up:
    """`mbds up ARGS` in the background, its output read line by line."""

    def __init__(self, data: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mbds", "up", "--port", "0", "--data-dir", str(data),
             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = OutputLines(self.proc)
        self.out = "".join(self.lines.until("ready", 90))
        if "ready" not in self.out:
            self.proc.kill()
            raise AssertionError(f"mbds up did not become ready:\n{self.out}")

    def rest(self, timeout: float = 60) -> str:
        """What it prints until it exits, which it is waited for."""
        self.proc.wait(timeout)
        return "".join(self.lines.until("\0", 10))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on loopback held by a listening socket: another program's."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


# --- scripts/run.sh ---------------------------------------------------------------


def run_sh(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    """scripts/run.sh with `mbds up` and `mbds health` real, and the rest of its work
    (pip, loading, Table 2, the experiments) only noted, with the status of the cluster
    each was pointed at; returns the run and those notes."""
    stubs, calls = tmp_path / "stubs", tmp_path / "calls"
    stubs.mkdir()
    (stubs / "mbds").write_text(
        "#!/bin/bash\n"
        'case "$1" in up|health) exec "$REAL_PYTHON" -m mbds "$@" ;; esac\n'
        'echo "mbds $*" >> "$CALLS"\n'
        'if [ "$1" = load ]; then "$REAL_PYTHON" -m mbds status --controller "$4" '
        '>> "$CALLS" 2>&1; fi\n')
    (stubs / "python3").write_text(
        "#!/bin/bash\n"
        'if [ "$1 $2" = "-m pip" ]; then echo "pip $*" >> "$CALLS"; exit 0; fi\n'
        'exec "$REAL_PYTHON" "$@"\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MBDS_")}
    run = subprocess.run(
        ["bash", str(ROOT / "scripts" / "run.sh")], capture_output=True, text=True,
        timeout=300, env={**clean, "PATH": f"{stubs}:{os.environ['PATH']}",
                          "REAL_PYTHON": sys.executable, "CALLS": str(calls), **env})
    return run, calls.read_text() if calls.exists() else ""


def test_run_sh_measures_a_cluster_of_its_own_beside_one_already_running(
        cluster_factory, tmp_path: Path) -> None:
    """A cluster already serving (README's example leaves one on 50051) is never loaded
    into or measured: run.sh starts its own on a free port and points every command at
    the address it printed. A CA or token exported for the user's cluster is not
    passed on to the plaintext one run.sh starts."""
    mine = cluster_factory(1)
    run, calls = run_sh(tmp_path, {"BACKENDS": "1", "MBDS_CA": str(tmp_path / "nope.pem"),
                                   "MBDS_TOKEN": "x" * 32})
    assert run.returncode == 0, run.stdout + run.stderr + calls
    head = run.stdout.split("\n", 4)[:4]
    assert "minutes" in " ".join(head) and "root" in " ".join(head), run.stdout
    [load] = re.findall(r"^mbds load paper --controller (\S+) ", calls, re.M)
    assert load != mine.cluster.address
    assert re.search(rf"^mbds paper table2 --controller {re.escape(load)} ", calls, re.M)
    assert re.search(r"^mbds bench paper --backends 1,2,4 ", calls, re.M), calls
    # The address loaded into was that of a cluster of one backend, not the user's.
    status = re.search(r"^cluster (\S+); backends (\d+);", calls, re.M)
    assert status and status.group(2) == "1", calls
    assert status.group(1) != mine.client.status().cluster
    assert list(mine.client.status().files) == []                    # nothing loaded into it


def test_run_sh_stops_when_its_own_cluster_cannot_start(cluster_factory,
                                                        tmp_path: Path) -> None:
    """Given the port of a cluster already running (MBDS_PORT), its `mbds up` fails:
    run.sh shows why and exits non-zero, loading into nothing."""
    mine = cluster_factory(1)
    port = mine.cluster.address.rsplit(":", 1)[1]
    run, calls = run_sh(tmp_path, {"BACKENDS": "1", "MBDS_PORT": port})
    assert run.returncode != 0, run.stdout + run.stderr
    assert f"port {port} of 127.0.0.1 is in use" in run.stderr, run.stderr
    assert "mbds load" not in calls and "mbds paper" not in calls, calls
    assert list(mine.client.status().files) == []


# --- mbds up ----------------------------------------------------------------------


def test_up_exits_1_naming_the_signal_that_killed_a_process_and_the_way_back(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    up = Up(data, "--backends", "2")
    try:
        [b0] = [p for p in psutil.Process(up.proc.pid).children()
                if str(data / "b0") in p.cmdline()]
        b0.send_signal(signal.SIGKILL)
        out = up.rest()
    finally:
        up.stop()
    assert up.proc.returncode == 1, out
    assert "backend b0 exited: killed by signal 9 (SIGKILL)" in out, out
    assert f"`mbds up --backends 2 --port 0 --data-dir {data}` brings the cluster back" \
        in out, out
    # As it says: the same command brings it back.
    again = Up(data, "--backends", "2")
    again.stop()
    assert again.proc.returncode == 0


def test_up_with_tokens_says_where_the_ca_and_the_token_go(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    r = mbds("certs", "--dir", str(tmp_path / "certs"), "--tokens", str(tokens))
    assert r.returncode == 0, r.stderr
    up = Up(tmp_path / "data", "--backends", "1", "--tokens", str(tokens))
    up.stop()
    assert f"MBDS_CA={tmp_path / 'data' / 'tls' / 'ca.pem'}" in up.out, up.out
    assert f"MBDS_TOKEN=a read or write token of {tokens}" in up.out, up.out


def test_a_port_in_use_is_named_before_grpc_logs_about_it(tmp_path: Path,
                                                          listening: int) -> None:
    """gRPC logs a raw line of its own (`E… add_port.cc:83] Failed to add port …`) before
    failing a bind; a port in use is found first, and named alone. `mbds up` finds its
    own before starting any backend."""
    held = f"127.0.0.1:{listening}"
    r = mbds("up", "--port", str(listening), "--data-dir", str(tmp_path / "up"))
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith(f"error: port {listening} of 127.0.0.1 is in use"), r.stderr
    assert "--port 0 for a free one" in r.stderr
    assert not (tmp_path / "up").exists()           # nothing was started
    for args, what in [
            (["controller", "--listen", held], "the controller's client port"),
            (["controller", "--internal-listen", held, "--listen", "127.0.0.1:0"], "IIG"),
            (["backend", "--listen", held], "the backend")]:
        if args[0] == "controller":
            args += ["--backends", "127.0.0.1:1"]
        r = mbds(*args, "--data-dir", str(tmp_path / args[0]))
        assert r.returncode == 1, r.stderr
        assert f"error: {what} cannot listen on {held}: the port is in use" in r.stderr, \
            r.stderr
        assert not GRPC_LOG_LINE.search(r.stderr), r.stderr


def test_a_data_file_that_is_not_sqlites_is_named_not_a_traceback(tmp_path: Path) -> None:
    """A backend's backend.db or the controller's decisions.db that is not a SQLite
    database (another file there, or one damaged): the process stops naming its data
    dir and SQLite's word for it, and the file is left as it was."""
    junk = b"not a database " * 100
    for args, name in [(["backend", "--listen", "127.0.0.1:0"], "backend.db"),
                       (["controller", "--listen", "127.0.0.1:0", "--internal-listen",
                         "127.0.0.1:0", "--backends", "127.0.0.1:1"], "decisions.db")]:
        data = tmp_path / args[0]
        data.mkdir()
        (data / name).write_bytes(junk)
        r = mbds(*args, "--data-dir", str(data))
        assert r.returncode == 1, r.stderr
        assert r.stderr == f"error: data dir {data}: file is not a database\n", r.stderr
        assert (data / name).read_bytes() == junk


# --- the shell --------------------------------------------------------------------


def test_a_request_the_shell_sent_too_soon_says_how_to_go_on(cluster_factory,
                                                             tmp_path: Path) -> None:
    """The shell sends a request once its brackets balance: a RETRIEVE broken after its
    query fails at the end of its input, and says so; a request that fails otherwise, or
    one the input ended inside, gets no such word."""
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    script = ("RETRIEVE (FILE = Census)\n"
              "(COUNT(CITY))\n"
              "RETRIEVE (FILE = Census) (\n"
              "COUNT(CITY))\n"
              "RETRIEVE (FILE = Nowhere) (CITY)\n"
              "RETRIEVE ((FILE = Census) and\n")
    out = subprocess.run([sys.executable, "-m", "mbds", "shell", "--controller",
                          r.cluster.address], input=script, capture_output=True, text=True,
                         env={**os.environ, "HOME": str(tmp_path), "COLUMNS": "1000"},
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    errors = [line for line in out.stdout.splitlines() if line.startswith("error")]
    assert len(errors) == 4, out.stdout
    assert errors[0].endswith("found end of input (the shell sends a request once its "
                              "brackets balance: begin a RETRIEVE's target list on the "
                              "line its query ends on)"), errors[0]
    assert errors[1].startswith("error: line 2 of the input: ") and "found '('" in errors[1]
    assert "COUNT(CITY)" in out.stdout                  # the request over two lines ran
    assert "unknown file NOWHERE" in errors[2] and "the shell sends" not in errors[2]
    assert errors[3].endswith("found end of input"), errors[3]


# --- help texts -------------------------------------------------------------------


def commands(group: click.Group, ctx: click.Context, path: str = "mbds"
             ) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from commands(command, ctx, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def test_every_option_says_what_it_is_for() -> None:
    """The benchmarks' own options aside (loadgen/), every option of every command has
    a help text; --controller says where a TLS client port's CA and token come from."""
    from cli.main import main
    ctx = click.Context(main)
    silent, controllers = [], []
    for path, command in commands(main, ctx):
        for p in command.params:
            if isinstance(p, click.Option) and p.name != "help":
                if not p.help and not path.startswith("mbds bench "):
                    silent.append(f"{path} {p.opts[0]}")
                if "--controller" in p.opts:
                    controllers.append(path)
                    assert "MBDS_CA" in p.help and "MBDS_TOKEN" in p.help, path
    assert silent == []
    assert {"mbds exec", "mbds status", "mbds shell", "mbds define", "mbds load paper",
            "mbds dump", "mbds paper table2", "mbds report handlers"} <= set(controllers)


@pytest.mark.parametrize("group", [[], ["bench"], ["load"], ["paper"], ["report"]])
def test_a_command_list_shows_each_summary_whole(group: list[str]) -> None:
    """At click's default width (80 columns) a summary longer than the room left is
    cut short with "..."."""
    r = subprocess.run([sys.executable, "-m", "mbds", *group, "--help"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split("\nCommands:\n", 1)[1]
    assert "..." not in listed, listed


def test_table2_of_one_run_says_one_run(cluster_factory) -> None:
    r = cluster_factory(1)
    with Client(r.cluster.address) as c:
        P.load(c)
    out = mbds("paper", "table2", "--controller", r.cluster.address,
               env={"COLUMNS": "200"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "beside the paper's counts; 1 run" in out.stdout, out.stdout
    assert "1 runs" not in out.stdout
