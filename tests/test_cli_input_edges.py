"""Edges of `mbds load file`'s input and of what a dump gives back, through the command
line (click's runner) on a real cluster of two backends: JSON Lines whose lines end in
CR alone, and a float -0.0, which SQLite stores as 0.0 (docs/abdl.md)."""

from __future__ import annotations

import json
import math
import zlib

from click.testing import CliRunner, Result

from cli.main import main as cli
from tests.conftest import Running, module_cluster

DEFINITION = """
files:
  {name}:
    attributes: {{N: integer, X: float, S: string}}
    directory:
      N: {{type: A, ranges: [[0, 1000]]}}
"""


cluster = module_cluster("input_edges")


def define(r: Running, seed: str) -> str:
    name = f"E{zlib.crc32(seed.encode())}"
    r.client.define(DEFINITION.format(name=name))
    return name


def mbds(r: Running, *args: str, input: bytes | None = None) -> Result:
    return CliRunner().invoke(cli, [*args, "--controller", r.cluster.address], input=input)


def stored(r: Running, name: str) -> list[int]:
    [res] = r.client.execute(f"RETRIEVE (FILE = {name}) (N)")
    return sorted(rec["N"] for rec in res.records)


def test_jsonl_lines_ended_by_a_carriage_return_alone_are_refused_saying_so(
        cluster: Running) -> None:
    """Lines are split at LF: a file of CR-ended lines is one line of many objects, refused
    by its first line with what to do, nothing stored; a line's own CR before its LF, or
    a CR as JSON's white space inside an object, is no such thing."""
    name = define(cluster, "cr only")
    run = mbds(cluster, "load", "file", name, "-", "--format", "jsonl",
               input=b'{"N": 1, "S": "a"}\r{"N": 2, "S": "b"}\r{"N": 3, "S": "c"}\r')
    assert run.exit_code == 1, run.output
    assert run.stderr == (
        "error: line 1: not JSON (a second value at column 20 after a carriage return: lines "
        f"ended by CR alone? Use LF) (records loaded into {name}: 0)\n")
    assert stored(cluster, name) == []
    run = mbds(cluster, "load", "file", name, "-", "--format", "jsonl",
               input=b'{"N": 1, "S": "a"}\r\n{"N":\r2}\r\n')
    assert run.exit_code == 0, run.output
    assert stored(cluster, name) == [1, 2]
    # Anything else after a value is JSON's own error, as written.
    run = mbds(cluster, "load", "file", name, "-", "--format", "jsonl",
               input=b'{"N": 3} {"N": 4}\n')
    assert run.exit_code == 1, run.output
    assert run.stderr == (f"error: line 1: not JSON (Extra data at column 10) (records "
                          f"loaded into {name}: 0)\n")


def test_minus_zero_comes_back_as_zero_and_either_zero_finds_it(cluster: Running) -> None:
    """A float -0.0, inserted by ABDL or loaded from JSON Lines or CSV, is stored as 0.0
    (SQLite keeps no sign on a zero): a dump gives 0.0, and `X = 0.0` and `X = -0.0`
    both find every one of them."""
    name = define(cluster, "minus zero")
    [res] = cluster.client.execute(f"INSERT (<FILE, {name}>, <N, 1>, <X, -0.0>)")
    assert res.stats["records_retrieved"] == 1
    run = mbds(cluster, "load", "file", name, "-", "--format", "jsonl",
               input=b'{"N": 2, "X": -0.0}\n{"N": 3, "X": -0e5}\n')
    assert run.exit_code == 0, run.output
    run = mbds(cluster, "load", "file", name, "-", "--format", "csv", input=b"N,X\n4,-0.0\n")
    assert run.exit_code == 0, run.output
    run = mbds(cluster, "dump", name)
    assert run.exit_code == 0, run.output
    dumped = sorted(run.stdout.splitlines())
    assert dumped == [f'{{"N": {n}, "X": 0.0, "S": null, "BODY": null}}' for n in (1, 2, 3, 4)]
    assert all(math.copysign(1.0, json.loads(line)["X"]) == 1.0 for line in dumped)
    for zero in ("0.0", "-0.0", "0"):
        [res] = cluster.client.execute(f"RETRIEVE ((FILE = {name}) and (X = {zero})) (N, X)")
        assert sorted((rec["N"], rec["X"]) for rec in res.records) == [
            (1, 0.0), (2, 0.0), (3, 0.0), (4, 0.0)], zero
        assert all(math.copysign(1.0, rec["X"]) == 1.0 for rec in res.records)
