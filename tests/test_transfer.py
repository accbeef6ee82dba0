"""`mbds load file` and `mbds dump` on a real cluster of two backends, through the real
command line: a dump read back by a load gives the same records (JSON Lines exactly,
CSV but for the empty string), and bad input is refused named by its line and column,
with every record before it loaded and none after."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Running, module_cluster
from tests.crashes import retry

DEFINITION = """
files:
  {name}:
    attributes: {{N: integer, X: float, S: string}}
    directory:
      N: {{type: A, ranges: [[0, 1000]]}}
"""
ATTRS = ["N", "X", "S"]
# Values at the edges of what each type holds, and those a careless format would change.
RECORDS: list[tuple[list[Any], str | None]] = [
    ([2**63 - 1, 0.1, "plain"], "a body"),
    ([-(2**63), 1e-300, ""], ""),                       # empty string and empty body
    ([None, None, None], None),                         # nulls
    ([0, 1.7976931348623157e308, "é日本😀\u2028x"], 'a line\nbreak, "quotes"'),
    ([9007199254740993, 5e-324, "comma, quote \" and\r\nCRLF"], None),  # past 2**53
    ([7, -2.5, "  spaces  "], "ünïcode"),
    ([12, 1.0, "42"], "null"),                          # strings that look like others
    ([-1, 0.30000000000000004, None], "x"),
    ([3, 2.0, "big"], "b" * 200_000),                   # past csv's field size limit
]


def mbds(r: Running, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mbds", *args, "--controller",
                           r.cluster.address], capture_output=True, input=input, timeout=120)


def jsonl(records: list[tuple[list[Any], str | None]]) -> list[str]:
    """`records` as JSON lines, sorted (a dump's order is the backends')."""
    return sorted(json.dumps(dict(zip([*ATTRS, "BODY"], [*values, body], strict=True)),
                             ensure_ascii=False) for values, body in records)


def lines(text: str) -> list[str]:
    """A dump's records, each as its line or `jsonl` writes it (the same JSON text but
    for the escapes), sorted: an integer and a float equal to it stay apart (1 and 1.0)."""
    assert text.endswith("\n") and text.splitlines() == text.split("\n")[:-1]
    return sorted(json.dumps(json.loads(line), ensure_ascii=False) for line in text.splitlines())


def dumped(r: Running, name: str, *args: str) -> list[str]:
    out = mbds(r, "dump", name, *args)
    assert out.returncode == 0, out.stderr.decode()
    return lines(out.stdout.decode("utf-8"))


def stored(r: Running, name: str) -> list[Any]:
    [res] = r.client.execute(f"RETRIEVE (FILE = {name}) (N)")
    return sorted((rec["N"] for rec in res.records), key=lambda n: (n is None, n))


cluster = module_cluster("transfer")


def define(r: Running, name: str,
           records: Sequence[tuple[list[Any], str | None]] = ()) -> None:
    r.client.define(DEFINITION.format(name=name))
    list(r.client.load(name, ATTRS, records))


def test_a_jsonl_dump_loads_back_to_the_same_records(cluster: Running,
                                                      tmp_path: Path) -> None:
    define(cluster, "ROUND", RECORDS)
    out = mbds(cluster, "dump", "ROUND")
    assert out.returncode == 0, out.stderr.decode()
    first = out.stdout.decode("utf-8")
    assert lines(first) == jsonl(RECORDS)                   # exactly, nothing lost
    (tmp_path / "round.jsonl").write_text(first, encoding="utf-8")
    cluster.client.execute("DELETE (FILE = ROUND)")
    out = mbds(cluster, "load", "file", "round", str(tmp_path / "round.jsonl"), "--progress")
    assert out.returncode == 0, out.stderr.decode()
    assert f" {len(RECORDS)}/{len(RECORDS)} records " in out.stderr.decode()   # the bar
    assert out.stdout.decode().startswith(f"loaded {len(RECORDS)} records into ROUND in ")
    out = mbds(cluster, "dump", "ROUND", "--out", str(tmp_path / "again.jsonl"))
    assert out.returncode == 0, out.stderr.decode()
    again = (tmp_path / "again.jsonl").read_text(encoding="utf-8")
    assert sorted(again.split("\n")) == sorted(first.split("\n"))


def test_a_csv_dump_loads_back_but_for_the_empty_string(cluster: Running,
                                                         tmp_path: Path) -> None:
    define(cluster, "VIACSV", RECORDS)
    path = tmp_path / "viacsv.csv"
    out = mbds(cluster, "dump", "VIACSV", "--out", str(path))       # CSV by the suffix
    assert out.returncode == 0, out.stderr.decode()
    assert path.read_bytes().startswith(b"N,X,S,BODY\r\n")
    cluster.client.execute("DELETE (FILE = VIACSV)")
    out = mbds(cluster, "load", "file", "VIACSV", str(path), "--chunk", "3")
    assert out.returncode == 0, out.stderr.decode()
    # CSV cannot tell an empty string from null: both come back null.
    expected = [([v if v != "" else None for v in values], body or None)
                for values, body in RECORDS]
    assert dumped(cluster, "VIACSV") == jsonl(expected)


BAD_CSV = (b'n,x,s\n'
           b'1,0.5,a\n'
           b'2,1.5,"two\nlines"\n'          # lines 3 and 4
           b'3,,c\n'
           b'4,2.5,d\n'
           b'5,3.5,e\n'
           b'many,1,f\n'                    # line 8
           b'6,1,g\n')


def test_a_bad_value_is_named_by_line_and_column_and_nothing_after_it_loads(
        cluster: Running, tmp_path: Path) -> None:
    define(cluster, "BAD")
    (tmp_path / "bad.csv").write_bytes(BAD_CSV)
    out = mbds(cluster, "load", "file", "BAD", str(tmp_path / "bad.csv"), "--chunk", "2")
    assert out.returncode == 1 and out.stdout == b""
    assert out.stderr.decode() == ("error: line 8, N: 'many' is not an integer "
                                   "(records loaded into BAD: 5)\n")
    assert stored(cluster, "BAD") == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(("line", "error"), [
    ('{"N": 1.5}', "line 2, N: 1.5 is not an integer"),
    ('{"N": true}', "line 2, N: true is not an integer"),
    ('{"N": 9223372036854775808}', "line 2, N: 9223372036854775808 is beyond 64-bit integers"),
    ('{"X": "0.5"}', 'line 2, X: "0.5" is not a number'),
    ('{"X": false}', "line 2, X: false is not a number"),
    ('{"X": NaN}', "line 2, X: NaN is out of a float's range"),
    ('{"X": 1e999}', "line 2, X: 1e999 is out of a float's range"),
    ('{"S": 5}', "line 2, S: 5 is not a string"),
    ('{"BODY": ["a"]}', 'line 2, BODY: ["a"] is not a string'),
    ('{"s": "a", "S": "b"}', "line 2: S is named twice"),
    ('["a"]', "line 2: not a JSON object"),
    ('{"N": 2,}', "line 2: not JSON (Expecting property name enclosed in double quotes at "
                  "column 9)"),
    ('{"N": 2', "line 2: not JSON (Expecting ',' delimiter at column 8)"),   # at its end
    ('{"m": 2}', "line 2: 'm' is not an attribute of {name} (N, X, S, BODY)"),
])
def test_jsonl_values_are_checked_against_the_attribute_types(
        cluster: Running, line: str, error: str) -> None:
    name = f"TYPES{zlib.crc32(line.encode())}"
    define(cluster, name)
    out = mbds(cluster, "load", "file", name, "-", "--format", "jsonl",
               input=f'{{"n": 1, "x": 2, "s": "ok"}}\n{line}\n{{"N": 3}}\n'.encode())
    assert out.returncode == 1
    error = error.format(name=name)
    assert out.stderr.decode() == f"error: {error} (records loaded into {name}: 1)\n"
    assert stored(cluster, name) == [1]


def test_an_unknown_column_is_refused_before_anything_is_loaded(cluster: Running,
                                                                 tmp_path: Path) -> None:
    define(cluster, "UNKNOWN")
    (tmp_path / "unknown.csv").write_bytes(b"n,people,s\n1,2,a\n2,3,b\n")
    out = mbds(cluster, "load", "file", "UNKNOWN", str(tmp_path / "unknown.csv"))
    assert out.returncode == 1
    assert out.stderr.decode().startswith(
        "error: line 1: 'people' is not an attribute of UNKNOWN (N, X, S, BODY)")
    assert stored(cluster, "UNKNOWN") == []


def test_standard_input_loads_and_needs_a_format(cluster: Running) -> None:
    define(cluster, "PIPED")
    text = "".join(line + "\n" for line in jsonl(RECORDS)).encode()
    out = mbds(cluster, "load", "file", "PIPED", "-", input=text)
    assert out.returncode == 2 and b"give --format for standard input" in out.stderr
    assert stored(cluster, "PIPED") == []
    out = mbds(cluster, "load", "file", "PIPED", "-", "--format", "jsonl", input=text)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().startswith(f"loaded {len(RECORDS)} records into PIPED")
    assert dumped(cluster, "PIPED") == jsonl(RECORDS)
    csv_text = b"S,n\r\nfrom stdin,1\r\n"
    out = mbds(cluster, "load", "file", "PIPED", "-", "--format", "csv", input=csv_text)
    assert out.returncode == 0, out.stderr.decode()
    assert json.dumps({"N": 1, "X": None, "S": "from stdin", "BODY": None}) in dumped(
        cluster, "PIPED")


def test_input_that_is_not_utf8_is_refused_naming_the_line(cluster: Running,
                                                           tmp_path: Path) -> None:
    define(cluster, "NOTUTF8")
    (tmp_path / "latin1.csv").write_bytes(b"n,s\n1,ok\n2,caf\xe9\n3,ok\n")
    out = mbds(cluster, "load", "file", "NOTUTF8", str(tmp_path / "latin1.csv"))
    assert out.returncode == 1
    assert out.stderr.decode() == (
        f"error: line 3 of {tmp_path / 'latin1.csv'} is not valid UTF-8 (byte 0xe9 at "
        "position 5) (records loaded into NOTUTF8: 1)\n")
    assert stored(cluster, "NOTUTF8") == [1]


def test_an_unknown_file_is_refused(cluster: Running, tmp_path: Path) -> None:
    (tmp_path / "x.jsonl").write_text('{"N": 1}\n')
    for args in (["load", "file", "NOSUCH", str(tmp_path / "x.jsonl")], ["dump", "NOSUCH"]):
        out = mbds(cluster, *args)
        assert out.returncode == 1 and out.stderr == b"error: unknown file NOSUCH\n"


def test_a_dump_whose_reader_leaves_ends_quietly(cluster: Running) -> None:
    """`mbds dump NAME | head -1`: the dump stops when its reader leaves, without an
    error, and the cluster serves on."""
    define(cluster, "HEADED", [([k, 0.5, "s" * 1000], None) for k in range(5000)])
    dump = subprocess.Popen([sys.executable, "-m", "mbds", "dump", "HEADED", "--controller",
                             cluster.cluster.address], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert dump.stdout is not None and dump.stderr is not None
    first = dump.stdout.readline()
    dump.stdout.close()                     # as `head -1` does after its line
    assert dump.wait(timeout=60) == 141
    assert dump.stderr.read() == b""
    assert json.loads(first)["X"] == 0.5
    assert stored(cluster, "HEADED") == list(range(5000))


def test_a_load_cut_short_says_how_many_records_it_stored(cluster_factory,
                                                          tmp_path: Path) -> None:
    """A load the cluster fails part way (a backend failing every batch it is given)
    ends with the error and the number of records acknowledged, which are stored."""
    r = cluster_factory(2)
    r.client.define(DEFINITION.format(name="CUT"))
    r.cluster.backends[1].kill()
    r.cluster.restart_backend(1, env={"MBDS_FAULTS": "backend.before_prepare=error"})
    retry(r.client, "RETRIEVE (FILE = Cut) (N)", timeout=60)
    data = tmp_path / "cut.csv"
    data.write_text("N,X,S\n" + "".join(f"{n},0.5,s\n" for n in range(10)))
    out = mbds(r, "load", "file", "CUT", str(data), "--no-progress")
    assert out.returncode == 1
    err = out.stderr.decode()
    assert "fault injected at backend.before_prepare" in err
    assert err.rstrip().endswith(f"(records loaded into CUT: {len(stored(r, 'CUT'))})")


def _load_to_interrupt(cluster: Running, tmp_path: Path, name: str) -> subprocess.Popen:
    """`mbds load file` of a million records into a new file NAME, under way (some
    stored)."""
    define(cluster, name)
    data = tmp_path / "stopped.csv"
    data.write_text("N,X,S\n" + "".join(f"{n % 1000},0.5,s\n" for n in range(1_000_000)))
    load = subprocess.Popen([sys.executable, "-m", "mbds", "load", "file", name, str(data),
                             "--chunk", "1000", "--no-progress", "--controller",
                             cluster.cluster.address], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    while not _stored(cluster, name):
        assert load.poll() is None, load.communicate()
    return load


def _stored(cluster: Running, name: str) -> int:
    return cluster.client.execute(f"RETRIEVE (FILE = {name}) (COUNT(N))")[0].records[0][
        "COUNT(N)"]


def test_a_load_stopped_by_ctrl_c_says_exactly_how_many_records_it_stored(
        cluster: Running, tmp_path: Path) -> None:
    """Ctrl-C part way through a load ends the input; the batches sent are answered, and
    the load ends with no traceback, exit 130, and the number of records stored: the
    input's first ones."""
    load = _load_to_interrupt(cluster, tmp_path, "STOPPED")
    load.send_signal(signal.SIGINT)
    out, err = load.communicate(timeout=60)
    assert load.returncode == 130, err.decode()
    text = err.decode()
    assert "Traceback" not in text and "Exception" not in text, text
    m = re.fullmatch(r"interrupting: the batches sent finish first \(Ctrl-C again to leave "
                     r"at once\)\nerror: interrupted; loaded (\d+) records into STOPPED: the "
                     r"input's first \1, and none after them\n", text)
    assert m is not None, repr(text)
    assert 0 < int(m[1]) == _stored(cluster, "STOPPED") < 1_000_000


def test_a_load_left_at_once_by_a_second_ctrl_c_names_the_records_in_flight(
        cluster: Running, tmp_path: Path) -> None:
    """A second Ctrl-C leaves without waiting: the records acknowledged are stored, and
    those sent after them, named, may be stored too (a batch being committed commits)."""
    load = _load_to_interrupt(cluster, tmp_path, "LEFT")
    load.send_signal(signal.SIGINT)
    assert load.stderr is not None
    first = load.stderr.readline().decode()
    assert first.startswith("interrupting"), first
    load.send_signal(signal.SIGINT)
    out, err = load.communicate(timeout=60)
    assert load.returncode == 130, err.decode()
    text = err.decode()
    assert "Traceback" not in text and "Exception" not in text, text
    m = re.search(r"error: interrupted \(records loaded into LEFT: (\d+)(; records "
                  r"(\d+)-(\d+) were in flight and may be stored too: count the file's "
                  r"records before going on)?\)\n$", text)
    assert m is not None, text
    acknowledged = int(m[1])
    sent = int(m[4]) if m[2] else acknowledged
    assert not m[2] or int(m[3]) == acknowledged + 1
    time.sleep(1)                  # what was in flight has committed or aborted by now
    assert acknowledged <= _stored(cluster, "LEFT") <= sent < 1_000_000


def _orphaned(r: Running, load: subprocess.Popen, name: str) -> tuple[int, int]:
    """The controller killed under `load`: it exits 1, no traceback, naming the records
    acknowledged and those in flight after them; (acknowledged, last in flight)."""
    assert r.cluster.controller is not None
    r.cluster.controller.kill()
    out, err = load.communicate(timeout=60)
    text = err.decode()
    assert load.returncode == 1, text
    assert "Traceback" not in text and "Exception" not in text, text
    m = re.search(rf"\(records loaded into {name}: (\d+); records (\d+)-(\d+) were in "
                  r"flight and may be stored too: count the file's records before going "
                  r"on\)\n$", text)
    assert m is not None, text
    acknowledged, first, sent = int(m[1]), int(m[2]), int(m[3])
    assert first == acknowledged + 1 <= sent
    return acknowledged, sent


def test_a_load_whose_controller_dies_names_the_records_in_flight(
        cluster_factory, tmp_path: Path) -> None:
    """The controller killed mid-load: the records acknowledged are stored, and those
    sent after them, named, may be too; after a restart the file holds no fewer than
    the first and no more than the second."""
    r = cluster_factory(2)
    load = _load_to_interrupt(r, tmp_path, "ORPHANED")
    acknowledged, sent = _orphaned(r, load, "ORPHANED")
    r.cluster.restart_controller()
    retry(r.client, "RETRIEVE (FILE = Orphaned) (COUNT(N))", timeout=60)
    assert acknowledged <= _stored(r, "ORPHANED") <= sent


def test_a_dump_stopped_by_ctrl_c_says_how_many_whole_records_it_wrote(
        cluster: Running) -> None:
    """Ctrl-C part way through a dump stops it at the end of a row batch: exit 130, no
    traceback, and the number of records written, each whole, which is what the output
    holds."""
    define(cluster, "HALTED", [([k, 0.5, "s" * 1000], None) for k in range(20_000)])
    dump = subprocess.Popen([sys.executable, "-m", "mbds", "dump", "HALTED", "--controller",
                             cluster.cluster.address], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, bufsize=0)
    assert dump.stdout is not None
    # Unread, the pipe holds the dump at its first kilobytes of twenty megabytes. (No
    # reading ahead: `communicate` reads the pipe, not a buffer.)
    first = dump.stdout.readline()
    dump.send_signal(signal.SIGINT)
    out, err = dump.communicate(timeout=120)
    text = err.decode()
    assert dump.returncode == 130, text
    m = re.fullmatch(r"error: interrupted \(the dump is incomplete: (\d+) records of HALTED "
                     r"written to standard output\)\n", text)
    assert m is not None, repr(text)
    written = (first + out).decode().splitlines()
    assert 0 < len(written) == int(m[1]) < 20_000
    assert all(json.loads(line)["S"] == "s" * 1000 for line in written)


def test_a_paper_load_whose_controller_dies_names_the_records_in_flight(
        cluster_factory) -> None:
    """`mbds load paper` cut short says what it stored, as `mbds load file` does: the
    records acknowledged, and those sent after them, which may be stored too."""
    r = cluster_factory(2)
    load = subprocess.Popen([sys.executable, "-m", "mbds", "load", "paper", "--scale", "1000",
                             "--chunk", "1000", "--no-progress", "--controller",
                             r.cluster.address], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    while not retry(r.client, "RETRIEVE (FILE = PAPER) (COUNT(INTE1))", timeout=60)[0].records[
            0]["COUNT(INTE1)"]:
        assert load.poll() is None, load.communicate()
    acknowledged, sent = _orphaned(r, load, "PAPER")
    assert sent < 1_000_000
    r.cluster.restart_controller()
    [res] = retry(r.client, "RETRIEVE (FILE = PAPER) (COUNT(INTE1))", timeout=60)
    assert acknowledged <= res.records[0]["COUNT(INTE1)"] <= sent


def test_minus_zero_is_stored_as_zero_and_found_by_either(cluster: Running) -> None:
    """SQLite stores a REAL -0.0 as 0.0 (docs/abdl.md): it comes back without its sign,
    and compares equal to either zero, as IEEE 754 has it."""
    define(cluster, "SIGNED", [([1, -0.0, "a"], None)])
    r = cluster.client.execute("RETRIEVE ((FILE = SIGNED) and (X = 0.0)) (X)")[0]
    [[x]] = [list(rec.values()) for rec in r.records]
    assert x == 0.0 and math.copysign(1.0, x) == 1.0
    assert len(cluster.client.execute("RETRIEVE ((FILE = SIGNED) and (X = -0.0)) (X)")[0]
               .records) == 1
