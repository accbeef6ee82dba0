"""Ctrl-C (SIGINT) under `mbds dump --out PATH` and `mbds load paper`, once and twice,
sent to a real `mbds` process on a real cluster of two backends: each says what it left
behind, what was written or what was stored, and exits 130 with no traceback.

(`mbds load file` interrupted, once and twice, is in test_transfer.py.)"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadgen import paper_db
from tests.conftest import Running, module_cluster

DEFINITION = """
files:
  {name}:
    attributes: {{N: integer, X: float, S: string}}
    directory:
      N: {{type: A, ranges: [[0, 1000]]}}
"""
RECORDS = 20_000


cluster = module_cluster("interrupts")


def _count(r: Running, name: str, attr: str) -> int:
    [res] = r.client.execute(f"RETRIEVE (FILE = {name}) (COUNT({attr}))")
    return res.records[0][f"COUNT({attr})"]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_dump_to_a_file_stopped_by_ctrl_c_names_the_file_and_its_whole_records(
        cluster: Running, tmp_path: Path, fmt: str) -> None:
    """`mbds dump NAME --out PATH` interrupted: `the dump is incomplete: N records of NAME
    written to PATH`, exit 130, and PATH holds exactly those N records, each whole. PATH
    is a named pipe, so the dump waits on the test's reading and the signal comes while
    it is under way."""
    name = f"HALTED{fmt.upper()}"
    cluster.client.define(DEFINITION.format(name=name))
    list(cluster.client.load(name, ["N", "X", "S"],
                             [([k % 1000, 0.5, "s" * 1000], None) for k in range(RECORDS)]))
    out = tmp_path / f"halted.{fmt}"
    os.mkfifo(out)
    dump = subprocess.Popen([sys.executable, "-m", "mbds", "dump", name, "--out", str(out),
                             "--controller", cluster.cluster.address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(out, "rb") as pipe:
        first = pipe.readline()         # the dump has begun writing
        dump.send_signal(signal.SIGINT)
        written = first + pipe.read()   # to its end: the dump closes the file as it exits
    _, err = dump.communicate(timeout=120)
    text = err.decode()
    assert dump.returncode == 130, text
    m = re.fullmatch(rf"error: interrupted \(the dump is incomplete: (\d+) records of {name} "
                     rf"written to {re.escape(str(out))}\)\n", text)
    assert m is not None, repr(text)
    if fmt == "jsonl":
        rows = [json.loads(line) for line in written.decode().splitlines()]
    else:
        header, *cells = csv.reader(io.StringIO(written.decode(), newline=""))
        assert header == ["N", "X", "S", "BODY"]
        rows = [dict(zip(header, row, strict=True)) for row in cells]
    assert 0 < len(rows) == int(m[1]) < RECORDS
    assert all(row["S"] == "s" * 1000 for row in rows)


def _paper_load_under_way(cluster: Running) -> tuple[subprocess.Popen, int]:
    """`mbds load paper` of a million records, some stored; the records PAPER held
    before it (a test before this one may have loaded some)."""
    cluster.client.define(paper_db.definition_yaml(1000))     # as the load defines it
    before = _count(cluster, "PAPER", "INTE1")
    load = subprocess.Popen([sys.executable, "-m", "mbds", "load", "paper", "--scale",
                             "1000", "--chunk", "1000", "--no-progress", "--append",
                             "--controller", cluster.cluster.address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    while _count(cluster, "PAPER", "INTE1") == before:
        assert load.poll() is None, load.communicate()
    return load, before


def test_a_paper_load_stopped_by_ctrl_c_says_exactly_how_many_records_it_stored(
        cluster: Running) -> None:
    """`mbds load paper` interrupted, as `mbds load file` is: the batches sent are
    answered, and it exits 130 naming the records stored, the database's first ones."""
    load, before = _paper_load_under_way(cluster)
    load.send_signal(signal.SIGINT)
    _, err = load.communicate(timeout=120)
    text = err.decode()
    assert load.returncode == 130, text
    m = re.fullmatch(r"interrupting: the batches sent finish first \(Ctrl-C again to leave "
                     r"at once\)\nerror: interrupted; loaded ([\d,]+) of the 1,000,000 "
                     r"records into PAPER: the database's first \1, and none after them "
                     r"\(Table 2 counts a whole load: start again on an empty --data-dir\)\n",
                     text)
    assert m is not None, repr(text)
    assert 0 < int(m[1].replace(",", "")) == _count(cluster, "PAPER", "INTE1") - before \
        < 1_000_000


def test_a_paper_load_left_at_once_by_a_second_ctrl_c_says_what_it_stored(
        cluster: Running) -> None:
    """A second Ctrl-C leaves at once: exit 130, the records acknowledged, which are
    stored, and those sent after them, which may be. The file holds no fewer than the
    first and no more than the last of those, whatever the batches in flight came to."""
    load, before = _paper_load_under_way(cluster)
    load.send_signal(signal.SIGINT)
    assert load.stderr is not None
    first = load.stderr.readline().decode()
    assert first.startswith("interrupting"), first
    load.send_signal(signal.SIGINT)
    _, err = load.communicate(timeout=120)
    text = err.decode()
    assert load.returncode == 130, text
    m = re.fullmatch(r"error: interrupted \(records loaded into PAPER: (\d+)(?:; records "
                     r"(\d+)-(\d+) were in flight and may be stored too: count the file's "
                     r"records before going on)?\)\n", text)
    assert m is not None, repr(text)
    acknowledged = int(m[1])
    sent = int(m[3]) if m[2] else acknowledged
    assert not m[2] or int(m[2]) == acknowledged + 1
    time.sleep(1)                  # what was in flight has committed or aborted by now
    assert acknowledged <= _count(cluster, "PAPER", "INTE1") - before <= sent < 1_000_000
