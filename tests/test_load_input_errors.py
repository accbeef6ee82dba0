"""Input a load cannot take, refused by name on a real cluster: CSV that does not parse
(a quote left open, text after a closing quote), JSON Lines with a key twice or an
integer of thousands of digits, a lone surrogate from JSON or from Python, and a raw
`Load` of rows, whose records are numbered from 1 as every other path numbers them."""

from __future__ import annotations

import subprocess
import sys
import zlib
from typing import Any

import grpc
import pytest

from mbds.client import ClientError
from mbds.proto import mbds_pb2 as pb
from tests.conftest import Running, module_cluster

DEFINITION = """
files:
  {name}:
    attributes: {{N: integer, X: float, S: string}}
    directory:
      N: {{type: A, ranges: [[0, 1000]]}}
"""


cluster = module_cluster("input_errors")


def define(r: Running, seed: str) -> str:
    name = f"F{zlib.crc32(seed.encode())}"
    r.client.define(DEFINITION.format(name=name))
    return name


def load(r: Running, name: str, fmt: str, data: bytes, *args: str
         ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mbds", "load", "file", name, "-",
                           "--format", fmt, *args, "--controller", r.cluster.address],
                          capture_output=True, input=data, timeout=120)


def stored(r: Running, name: str) -> list[Any]:
    [res] = r.client.execute(f"RETRIEVE (FILE = {name}) (N)")
    return sorted(rec["N"] for rec in res.records)


OPEN = "a quoted cell is not closed (the input ends inside its quotes)"
AFTER = "not CSV (text after a quoted cell's closing quote)"


@pytest.mark.parametrize(("data", "error", "before"), [
    # A quote left open would take every line after it into one cell.
    (b'N,S\n1,ok\n2,"abc\n3,x\n4,y\n', f"line 3: {OPEN}", [1]),
    (b'N,S\n1,ok\n2,"a\nb"\n4,"abc\n5,x\n', f"line 5: {OPEN}", [1, 2]),
    (b'N,S\n1,ok\n2,"abc"def\n3,x\n', f"line 3: {AFTER}", [1]),
    (b'N,S\n1,ok\n2,"a\nb"\n3,"c"d\n4,x\n', f"line 5: {AFTER}", [1, 2]),
])
def test_csv_that_does_not_parse_is_refused_naming_its_line(
        cluster: Running, data: bytes, error: str, before: list[int]) -> None:
    name = define(cluster, "csv" + data.decode())
    out = load(cluster, name, "csv", data, "--chunk", "1")
    assert out.returncode == 1 and out.stdout == b""
    assert out.stderr.decode() == (f"error: {error} (records loaded into {name}: "
                                   f"{len(before)})\n")
    # Every record before the bad one is loaded, none after it.
    assert stored(cluster, name) == before


def test_a_quote_left_open_in_the_header_is_refused_before_anything_is_sent(
        cluster: Running) -> None:
    name = define(cluster, "header")
    out = load(cluster, name, "csv", b'N,"S\n1,ok\n')
    assert out.returncode == 1
    assert out.stderr.decode() == ("error: line 1: a quoted cell is not closed (the input "
                                   "ends inside its quotes)\n")
    assert stored(cluster, name) == []


@pytest.mark.parametrize(("line", "error"), [
    ('{"N": 2, "S": "a", "S": "b"}', "line 2: key 'S' appears twice in an object"),
    ('{"N": 2, "N": 3}', "line 2: key 'N' appears twice in an object"),
    ('{"N": 2, "BODY": {"k": 1, "k": 2}}', "line 2: key 'k' appears twice in an object"),
    ('{"N": ' + "7" * 5000 + "}",
     "line 2, N: " + "7" * 100 + "… (5000 characters) is beyond 64-bit integers"),
    ('{"N": -' + "7" * 4400 + "}",
     "line 2, N: -" + "7" * 99 + "… (4401 characters) is beyond 64-bit integers"),
    ('{"X": ' + "7" * 5000 + "}",
     "line 2, X: " + "7" * 100 + "… (5000 characters) is out of a float's range"),
    # A JSON number with an exponent or fraction where an integer goes, as written.
    ('{"N": 1e2}', "line 2, N: 1e2 is not an integer"),
    ('{"N": 2.50}', "line 2, N: 2.50 is not an integer"),
    ('{"S": "\\ud800"}',
     'line 2, S: "\\ud800" is not valid UTF-8 (character U+D800 at position 0)'),
    ('{"N": 2, "BODY": "ok \\udc80"}',
     'line 2, BODY: "ok \\udc80" is not valid UTF-8 (character U+DC80 at position 3)'),
    ('{"N": 2, "BODY": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "line 2: not JSON this reader takes (arrays or objects nested too deeply)"),
])
def test_jsonl_a_value_or_key_it_cannot_take_is_refused_naming_the_line(
        cluster: Running, line: str, error: str) -> None:
    name = define(cluster, "jsonl" + line)
    out = load(cluster, name, "jsonl", f'{{"N": 1}}\n{line}\n{{"N": 3}}\n'.encode())
    assert out.returncode == 1, out.stderr.decode()
    assert out.stderr.decode() == f"error: {error} (records loaded into {name}: 1)\n"
    assert stored(cluster, name) == [1]


def test_a_surrogate_pair_is_one_character_and_loads(cluster: Running) -> None:
    name = define(cluster, "pair")
    out = load(cluster, name, "jsonl", b'{"N": 1, "S": "\\ud83d\\ude00"}\n')
    assert out.returncode == 0, out.stderr.decode()
    [res] = cluster.client.execute(f"RETRIEVE (FILE = {name}) (S)")
    assert [rec["S"] for rec in res.records] == ["\U0001F600"]


@pytest.mark.parametrize(("records", "bodies", "error"), [
    # A column of strings, one by dictionary, one constant, one of mixed kinds, bodies.
    ([[5, 0.5, "c"], [6, 0.5, "\ud800"]], None,
     "record 6: string '\\ud800' is not valid UTF-8 (character U+D800 at position 0)"),
    ([[5, 0.5, "c"], [6, 0.5, "c"], [7, 0.5, "c"], [8, 0.5, "x\udfff"]], None,
     "record 8: string 'x\\udfff' is not valid UTF-8 (character U+DFFF at position 1)"),
    ([[5, 0.5, "\ud800"], [6, 0.5, "\ud800"]], None,
     "record 5: string '\\ud800' is not valid UTF-8 (character U+D800 at position 0)"),
    ([[5, 0.5, None], [6, 0.5, "\ud800"]], None,
     "record 6: string '\\ud800' is not valid UTF-8 (character U+D800 at position 0)"),
    ([[5, 0.5, "c"], [6, 0.5, "d"]], ["b", "ok\udc80"],
     "record 6: string 'ok\\udc80' is not valid UTF-8 (character U+DC80 at position 2)"),
])
def test_client_load_refuses_a_lone_surrogate_naming_its_record(
        cluster: Running, records: list[list[Any]], bodies: list[str | None] | None,
        error: str) -> None:
    name = define(cluster, f"client{records}{bodies}")
    rows = [*(([n, 0.5, "a"], None) for n in range(1, 5)),
            *zip(records, bodies or [None] * len(records), strict=True)]
    loaded = 0
    with pytest.raises(ClientError) as err:
        for done in cluster.client.load(name, ["N", "X", "S"], rows, chunk=4):
            loaded += done.stats.records_retrieved
    assert err.value.code == "INVALID_ARGUMENT"
    assert str(err.value) == f"{error} (its batch, records 5-{4 + len(records)}, is not loaded)"
    # The batch before the refused one is stored, nothing of it or after it.
    assert loaded == 4 and stored(cluster, name) == [1, 2, 3, 4]


def test_client_load_refuses_a_name_with_a_lone_surrogate(cluster: Running) -> None:
    name = define(cluster, "names")
    with pytest.raises(ClientError) as err:
        list(cluster.client.load(name, ["N", "S\ud800"], [([1, "a"], None)]))
    assert err.value.code == "INVALID_ARGUMENT"
    assert str(err.value) == ("name 'S\\ud800' is not valid UTF-8 (character U+D800 at "
                              "position 1)")
    assert stored(cluster, name) == []


def row(*values: Any) -> pb.Row:
    return pb.Row(values=[pb.Value(i=v) if isinstance(v, int) else pb.Value(s=v)
                          for v in values])


def test_a_raw_load_of_rows_numbers_its_records_from_1(cluster: Running) -> None:
    name = define(cluster, "rows")

    def raw(*chunks: list[pb.Row]) -> grpc.RpcError:
        requests = [pb.LoadRequest(file=name, attributes=["N", "S"], records=c)
                    for c in chunks]
        with pytest.raises(grpc.RpcError) as err:
            list(cluster.client.stub.Load(iter(requests), timeout=60))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        return err.value

    assert raw([row(1)]).details() == "record 1: 1 values for 2 attributes"
    assert raw([row(1, "a"), row(2)]).details() == "record 2: 1 values for 2 attributes"
    # Numbered in the load: a second chunk goes on from the first.
    assert raw([row(3, "a"), row(4, "b")], [row(5, "c"), row(6, "d", 7)]).details() == \
        "record 4: 3 values for 2 attributes"
    assert stored(cluster, name) == [3, 4]


def test_blank_lines_before_a_csv_header_are_skipped(cluster: Running) -> None:
    """As blank lines between records are: the header is the first line with cells, and
    an error in it names its own line."""
    name = define(cluster, "blankhead")
    out = load(cluster, name, "csv", b"\n\r\nN,X,S\n\n1,0.5,a\n")
    assert out.returncode == 0, out.stderr.decode()
    assert stored(cluster, name) == [1]
    out = load(cluster, name, "csv", b"\n\nN,Y,S\n1,0.5,a\n")
    assert out.returncode == 1
    assert out.stderr.decode().startswith(f"error: line 3: 'Y' is not an attribute of "
                                          f"{name.upper()}"), out.stderr.decode()


def test_csv_integers_with_leading_zeros_load_however_many(cluster: Running) -> None:
    """Leading zeros spell the same integer, even thousands of them (past Python's own
    limit on the digits of a conversion); digits past 64 bits are refused by name."""
    name = define(cluster, "zeros")
    data = f"N,S\n{'0' * 5000}7,a\n-{'0' * 5000}0,b\n+0009,c\n".encode()
    out = load(cluster, name, "csv", data)
    assert out.returncode == 0, out.stderr.decode()
    assert stored(cluster, name) == [0, 7, 9]
    name = define(cluster, "zeros past 64 bits")
    out = load(cluster, name, "csv", f"N,S\n{'0' * 5000}{'9' * 20},a\n".encode())
    assert out.returncode == 1
    assert out.stderr.decode() == (f"error: line 2, N: '{'0' * 99}… (5022 characters) is "
                                   f"beyond 64-bit integers (records loaded into {name}: 0)\n")


def test_csv_lines_of_spaces_are_skipped_as_blank_lines_are(cluster: Running) -> None:
    name = define(cluster, "spaces")
    out = load(cluster, name, "csv", b"N,X,S\n1,0.5,a\n   \n\t\r\n2,0.5,b\n")
    assert out.returncode == 0, out.stderr.decode()
    assert stored(cluster, name) == [1, 2]


def test_csv_lines_ended_by_a_carriage_return_alone_are_refused_saying_so(
        cluster: Running) -> None:
    name = define(cluster, "cr only")
    out = load(cluster, name, "csv", b"N,X,S\r1,0.5,a\r2,0.5,b\r")
    assert out.returncode == 1
    assert out.stderr.decode() == (
        "error: line 1: not CSV (a carriage return in an unquoted cell: lines ended by CR "
        "alone? Use LF)\n")
    assert stored(cluster, name) == []
