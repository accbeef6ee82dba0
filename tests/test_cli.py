"""The command-line contract, driven as a user would: `mbds up` in the background, then
`mbds define/load/exec/paper/status/health` against it, then SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CENSUS_YAML
from tests.lines import OutputLines


def mbds(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mbds", *args], capture_output=True,
                          text=True, input=input, timeout=120)


class Up:
    """`mbds up` in the background; its controller binds a port of its own (--port 0)
    and the address is read back from what it prints."""

    def __init__(self, data: Path, n: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mbds", "up", "--backends", str(n), "--port", "0",
             "--data-dir", str(data)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        self.lines = OutputLines(self.proc)
        self.out = self.lines.until("ready", 60)
        found = [m.group(1) for line in self.out if (m := re.match(r"controller (\S+)", line))]
        if not (found and "ready" in self.out[-1]):
            self.proc.kill()
            raise AssertionError("mbds up did not become ready:\n" + "".join(self.out))
        self.addr = found[0]

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(60) == 0, "".join(self.out)
        return "".join(self.out + self.lines.until("\0", 10))    # the rest of it


def test_up_exec_define_load_table2_and_clean_stop(tmp_path: Path) -> None:
    up = Up(tmp_path / "data", 2)
    try:
        assert f"controller {up.addr}" in "".join(up.out)
        assert f"export MBDS_CONTROLLER={up.addr}" in "".join(up.out)
        (tmp_path / "census.yaml").write_text(CENSUS_YAML)
        r = mbds("define", str(tmp_path / "census.yaml"), "--controller", up.addr)
        assert r.returncode == 0 and "created CENSUS" in r.stdout, r.stderr
        # Adding an index to the stored file: the one change a definition may make.
        (tmp_path / "census.yaml").write_text(CENSUS_YAML.replace(
            "      CITY: {type: C}\n", "      CITY: {type: C}\n    indexes: [AREA]\n", 1))
        r = mbds("define", str(tmp_path / "census.yaml"), "--controller", up.addr)
        assert r.returncode == 0 and "reindexed CENSUS" in r.stdout, r.stdout + r.stderr
        assert "unchanged STATES" in r.stdout
        r = mbds("exec", "--controller", up.addr, "--json",
                 "[INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>); "
                 "RETRIEVE (FILE = Census) (CITY, AVG(POP)) BY CITY]")
        assert r.returncode == 0, r.stderr
        ins, ret = [json.loads(line) for line in r.stdout.splitlines()]
        assert ins["op"] == "INSERT" and ins["stats"]["records_retrieved"] == 1
        assert ret["records"] == [{"CITY": "Monterey", "AVG(POP)": 25000.0}]
        assert set(ret) == {"op", "records", "stats", "elapsed_ms"}
        assert set(ret["stats"]) == {"clusters_examined", "records_retrieved", "backends"}
        assert [b["backend"] for b in ret["stats"]["backends"]] == ["b0", "b1"]
        assert set(ret["stats"]["backends"][0]) == {"backend", "records", "elapsed_ms"}
        # The readable table names the columns and the statistics.
        r = mbds("exec", "--controller", up.addr, "RETRIEVE (FILE = Census) (CITY, POP)")
        assert r.returncode == 0 and "Monterey" in r.stdout and "1 cluster examined" in r.stdout
        # Errors: stderr and a non-zero exit.
        r = mbds("exec", "--controller", up.addr, "RETRIEVE (FILE = Nope) (X)")
        assert r.returncode != 0 and "unknown file NOPE" in r.stderr and r.stdout == ""
        r = mbds("load", "paper", "--controller", up.addr)
        assert r.returncode == 0 and "loaded 1000 records" in r.stdout, r.stderr
        r = mbds("paper", "table2", "--controller", up.addr, "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        assert [x["clusters_examined"] for x in rows] == [2, 7, 13, 24, 9, 19, 10, 15, 19]
        assert all(x["match"] for x in rows)
        r = mbds("paper", "table2", "--controller", up.addr, "--json", "--multi", "2")
        assert r.returncode == 1 and "the counts differ from the paper's: was the database " \
            "loaded once, with `mbds load paper --scale 1 --multi 2`?" in r.stderr, r.stderr
        r = mbds("status", "--controller", up.addr)
        assert r.returncode == 0 and "b0" in r.stdout and "b1" in r.stdout
        kept = json.loads((tmp_path / "data" / "controller" / "members.json").read_text())
        assert r.stdout.startswith(f"cluster {kept['cluster']}; backends 2; files ")
        assert mbds("health", "--address", up.addr).stdout.strip() == "SERVING"
    finally:
        out = up.stop()
    assert "stopped" in out
    # Data survives a restart of the whole local cluster.
    up = Up(tmp_path / "data", 2)
    try:
        r = mbds("exec", "--controller", up.addr, "--json",
                 "RETRIEVE (FILE = Paper) (COUNT(INTE1))")
        assert json.loads(r.stdout)["records"] == [{"COUNT(INTE1)": 1000}], r.stderr
    finally:
        up.stop()


def test_health_fails_when_nothing_listens() -> None:
    with socket.socket() as held:      # bound, never listening: connections are refused
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        r = mbds("health", "--address", f"127.0.0.1:{port}", "--timeout", "0.5")
    assert r.returncode != 0 and "error" in r.stderr


@pytest.mark.parametrize("args", [["--help"], ["up", "--help"], ["exec", "--help"],
                                  ["load", "paper", "--help"], ["paper", "table2", "--help"]])
def test_help_works(args: list[str]) -> None:
    r = mbds(*args)
    assert r.returncode == 0 and "Usage" in r.stdout


def test_the_version_is_the_package_s() -> None:
    from importlib.metadata import version
    r = mbds("--version")
    assert r.returncode == 0 and r.stdout == f"mbds, version {version('mbds')}\n"


def test_the_cli_loads_without_the_benchmark_extras() -> None:
    """The service images install no `bench` extras: `mbds` (whose `bench` group imports
    loadgen) must start without psutil and matplotlib."""
    code = ("import sys\n"
            "for m in ('psutil', 'matplotlib'):\n"
            "    sys.modules[m] = None   # any import of them fails\n"
            "from cli.main import main\n"
            "sys.argv = ['mbds', 'backend', '--help']\n"
            "main()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Run one backend" in r.stdout, r.stderr


@pytest.mark.parametrize("service", ["backend", "controller"])
def test_the_services_import_no_benchmark_or_plotting(service: str) -> None:
    """`python -m mbds backend|controller --help` imports only its own command: no loadgen,
    matplotlib, psutil or rich (the command line imports a command when it runs)."""
    code = ("import runpy, sys\n"
            f"sys.argv = ['mbds', '{service}', '--help']\n"
            "try:\n"
            "    runpy.run_module('mbds', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print(' '.join(sorted(sys.modules)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "Usage" in r.stdout, r.stderr
    loaded = r.stdout.splitlines()[-1].split()
    assert "cli.services" in loaded
    assert [m for m in loaded if m.split(".")[0] in ("loadgen", "matplotlib", "psutil",
                                                     "rich")] == []


def test_a_table_shows_stored_values_as_they_are_never_as_markup() -> None:
    """`mbds exec` prints records with rich: a value that looks like markup is text."""
    from cli import tables
    from mbds.client import Result
    r = Result("RETRIEVE", ["S"], [{"S": "[/]"}, {"S": "[red]secret[/red] x"}],
               {"records_retrieved": 2, "backends": []})
    with tables.console.capture() as out:
        tables.render_result(r)
    assert "[/]" in out.get() and "[red]secret[/red] x" in out.get()


def test_a_table_tells_a_null_from_an_empty_string() -> None:
    from cli import tables
    from mbds.client import Result
    r = Result("RETRIEVE", ["S", "N"], [{"S": "", "N": 1}, {"S": None, "N": 2}],
               {"records_retrieved": 2, "backends": []})
    with tables.console.capture() as out:
        tables.render_result(r)
    empty, null = [line for line in out.get().splitlines() if "1" in line or "2" in line][:2]
    assert "(null)" in null and "(null)" not in empty, out.get()


def test_a_narrow_table_folds_a_number_whole_never_cuts_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a narrow terminal a long number wraps onto more lines with its exponent kept;
    cut with an ellipsis, 1.2345678901234567e+300 would read as a value near 1."""
    from rich.console import Console

    from cli import tables
    from mbds.client import Result
    monkeypatch.setattr(tables, "console", Console(width=60))
    r = Result("RETRIEVE", ["NAME_OF_SOME_LENGTH", "F", "G", "S"], [
        {"NAME_OF_SOME_LENGTH": "x" * 30, "F": 1.2345678901234567e+300,
         "G": -2.2250738585072014e-308, "S": "hello world " * 3}],
        {"records_retrieved": 1, "backends": []})
    with tables.console.capture() as out:
        tables.render_result(r)
    rows = [line.split("│")[1:-1] for line in out.get().splitlines() if line.startswith("│")]
    columns = ["".join(row[k].strip() for row in rows) for k in range(4)]
    assert "…" not in out.get()
    assert columns[1:3] == ["1.2345678901234567e+300", "-2.2250738585072014e-308"], columns


def test_a_controller_that_cannot_start_says_why_and_stops(cluster_factory,
                                                           tmp_path: Path) -> None:
    """A controller whose backends it refuses at start (here one backend given twice:
    two backends of one name) exits 1 naming why, without a traceback, its ports
    closed."""
    r = cluster_factory(1)
    assert r.cluster.controller is not None
    r.cluster.controller.stop()           # a backend serves one controller at a time
    address = r.cluster.backends[0].address or ""
    args = [sys.executable, "-m", "mbds", "controller", "--listen", "127.0.0.1:0",
            "--backends", f"{address},{address}", "--data-dir", str(tmp_path / "c")]
    if r.cluster.tls_dir is not None:
        args += ["--tls-dir", str(r.cluster.tls_dir)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("error: two backends share a name"), out.stderr
    assert "Traceback" not in out.stderr and "Event loop is closed" not in out.stderr


def test_a_controller_missing_a_backend_of_its_cluster_does_not_serve(
        cluster_factory) -> None:
    """A controller restarted with only some of its cluster's backends (each holds part
    of every cluster) refuses to start, naming those missing, instead of answering from
    part of the database and acknowledging writes the others miss; with all of them it
    serves as before."""
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Kept>, <POP, 1>)")
    r.cluster.controller.kill()
    b0 = r.cluster.backends[0].address or ""
    args = [sys.executable, "-m", "mbds", "controller", "--listen", "127.0.0.1:0",
            "--backends", b0, "--data-dir", str(r.cluster.data_dir / "controller")]
    if r.cluster.tls_dir is not None:
        args += ["--tls-dir", str(r.cluster.tls_dir)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("error: backend b1 of this cluster is not among those "
                                 "met (b0)"), out.stderr
    assert out.stderr.rstrip().endswith("; start it too (with compose: `up` with the same "
                                        "`--scale backend=N` as before)"), out.stderr
    r.cluster.restart_controller()
    [res] = r.client.execute("RETRIEVE (FILE = Census) (COUNT(CITY))")
    assert res.records == [{"COUNT(CITY)": 1}]


def test_a_controller_lists_the_metrics_url_it_serves(cluster_factory, tmp_path: Path) -> None:
    """/metrics is served on the --listen host; the URL `mbds status` lists is that one,
    not the host the backends reach IIG on (which `mbds report handlers` then failed
    to scrape)."""
    import urllib.request

    from mbds.client import Client
    from mbds.cluster import Proc
    r = cluster_factory(1)
    assert r.cluster.controller is not None and r.cluster.tls_dir is not None
    r.cluster.controller.stop()
    args = ["controller", "--listen", "127.0.0.2:0", "--internal-listen", "127.0.0.1:0",
            "--backends", r.cluster.backends[0].address or "", "--metrics-port", "0",
            "--tls-dir", str(r.cluster.tls_dir), "--client-plaintext",
            "--data-dir", str(tmp_path / "c")]
    proc = Proc("controller", args)
    try:
        with Client(proc.wait_ready(60)) as c:
            url = c.status().metrics_url
        assert url.startswith("http://127.0.0.2:"), url
        with urllib.request.urlopen(url, timeout=10) as page:
            assert b"mbds_" in page.read()
    finally:
        proc.stop()


def test_a_metrics_port_in_use_is_named_without_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = mbds("backend", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "b"),
                 "--metrics-port", str(port))
    assert r.returncode == 1, r.stderr
    assert f"error: /metrics cannot listen on 127.0.0.1:{port}: " in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = mbds("up", "--metrics-port", "65535", "--data-dir", str(tmp_path / "u"))
    assert r.returncode == 2 and "must be at most 65535" in r.stderr, r.stderr


@pytest.mark.parametrize("args, says", [
    (["up", "--port", "99999"], "'--port': 99999 is not in the range 0<=x<=65535"),
    (["up", "--backends", "0"], "'--backends': 0 is not in the range x>=1"),
    (["exec", "--controller", "127.0.0.1:99999", "RETRIEVE (FILE = F) (A)"],
     "'--controller': 127.0.0.1:99999: a port is at most 65535"),
    (["controller", "--listen", "127.0.0.1:70000", "--backends", "127.0.0.1:1",
      "--data-dir", "{tmp}"], "cannot listen on 127.0.0.1:70000: a port is at most 65535")])
def test_a_port_out_of_range_is_refused_by_name(tmp_path: Path, args: list[str],
                                                says: str) -> None:
    """gRPC would take port 99999 as 99999 mod 65536 (34463) without a word."""
    r = mbds(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert r.returncode != 0 and says in r.stderr, r.stderr


def test_no_controller_at_the_address_says_how_to_start_one() -> None:
    with socket.socket() as held:      # bound, never listening: connections are refused
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        r = mbds("exec", "--controller", f"127.0.0.1:{port}", "RETRIEVE (FILE = F) (A)")
    assert r.returncode == 1 and "Connection refused" in r.stderr and r.stderr.rstrip(
        ).endswith(" (is a controller running there? start one with `mbds up`, or with "
                   "`docker compose up -d` if you use the containers (docs/containers.md); "
                   "--controller or env MBDS_CONTROLLER gives another address)"), r.stderr


def test_a_result_line_counts_in_words_and_shows_each_backend(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Its per-backend part is shown as text (rich would read `[b0: …]` as a style)."""
    from cli import tables
    from mbds.client import Result
    monkeypatch.setattr(tables.console, "width", 200)
    backends = [{"backend": "b0", "records": 1, "elapsed_ms": 2.0},
                {"backend": "b1", "records": 0, "elapsed_ms": 1.25}]
    tables.render_result(Result("INSERT", [], stats={
        "records_retrieved": 1, "clusters_examined": 1, "backends": backends[:1]},
        elapsed_ms=5.9))
    tables.render_result(Result("DELETE", [], stats={
        "records_retrieved": 0, "clusters_examined": 2, "backends": backends},
        elapsed_ms=3.0))
    tables.render_result(Result("UPDATE", [], elapsed_ms=1.0))
    assert capsys.readouterr().out.splitlines() == [
        "INSERT: 1 record, 1 cluster examined, 5.9 ms  [b0: 1 in 2.0 ms]",
        "DELETE: 0 records, 2 clusters examined, 3.0 ms  [b0: 1 in 2.0 ms, b1: 0 in 1.2 ms]",
        "UPDATE: 0 records, 0 clusters examined, 1.0 ms"]
