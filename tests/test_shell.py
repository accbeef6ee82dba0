"""`mbds shell` driven through a real pseudo-terminal, as a person would type."""

from __future__ import annotations

import sys

import pexpect

from cli.shell import _complete
from tests.conftest import CENSUS_YAML


def test_enter_runs_only_balanced_input() -> None:
    assert _complete("RETRIEVE (FILE = Census) (CITY)")
    assert not _complete("RETRIEVE ((FILE = Census) and")
    assert not _complete("[INSERT (<FILE, Census>, <CITY, 'x'>);")
    assert _complete("RETRIEVE ((FILE = Census) and (POP < 5)) (CITY)")   # '<' is an operator


def test_shell_multiline_request_and_table(cluster_factory, tmp_path) -> None:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>)")
    child = pexpect.spawn(sys.executable, ["-m", "mbds", "shell", "--controller",
                                           r.cluster.address], env={"HOME": str(tmp_path),
                                                                    "TERM": "xterm"},
                          encoding="utf-8", timeout=30, dimensions=(40, 120))
    try:
        child.expect("mbds>")
        child.send("RETRIEVE ((FILE = Census) and\r")        # unbalanced: a new line
        child.expect(r"\.\.\.")
        child.send("(POP > 100)) (CITY, POP)\r")
        child.expect("Monterey")
        child.expect("clusters examined")
        child.send("RETRIEVE (FILE = Nowhere) (CITY)\r")
        child.expect("unknown file NOWHERE")
        child.send("\\q\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert (tmp_path / ".mbds" / "history").exists()
