"""`mbds shell` driven through a real pseudo-terminal, as a person would type; its
prompt loop and script reader also without one, over a stand-in client."""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pexpect
import pytest

from cli import describe, shell
from cli.shell import _complete, prompt_loop, run_script
from mbds.client import ClientError
from tests.conftest import CENSUS_YAML


def test_enter_runs_only_balanced_input() -> None:
    assert _complete("RETRIEVE (FILE = Census) (CITY)")
    assert not _complete("RETRIEVE ((FILE = Census) and")
    assert not _complete("[INSERT (<FILE, Census>, <CITY, 'x'>);")
    assert _complete("RETRIEVE ((FILE = Census) and (POP < 5)) (CITY)")   # '<' is an operator
    # Quotes and brackets inside strings, bodies and comments do not count.
    assert _complete("RETRIEVE ((FILE = Census) and (CITY = 'it\\'s')) (CITY)")
    assert _complete("RETRIEVE (CITY = \"(\") (CITY) -- don't (count this")
    assert not _complete("RETRIEVE (CITY = x) -- ok\n  and (")
    assert _complete("INSERT (<FILE, Census>, <CITY, a>) {a body with ) and ' and \\} in it}")
    assert not _complete("INSERT (<FILE, Census>, <CITY, a>) {a body that goes on")
    assert _complete("RETRIEVE (CITY = 'unclosed")      # sent: the server names it
    assert _complete("-- a comment alone, (unclosed")   # sent, for the loop to drop


def test_shell_multiline_request_and_table(cluster_factory, tmp_path) -> None:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>)")
    child = spawn_shell(r.cluster.address, tmp_path)
    try:
        child.expect("mbds>")
        child.send("RETRIEVE ((FILE = Census) and\r")        # unbalanced: a new line
        child.expect(r"\.\.\.")
        child.send("(POP > 100)) (CITY, POP)\r")
        child.expect("Monterey")
        child.expect("examined")
        child.send("RETRIEVE (FILE = Nowhere) (CITY)\r")
        child.expect("unknown file NOWHERE")
        child.send("\\q\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert (tmp_path / ".mbds" / "history").exists()


def spawn_shell(address: str, home: Path) -> pexpect.spawn:
    return pexpect.spawn(sys.executable, ["-m", "mbds", "shell", "--controller", address],
                         env={"HOME": str(home), "TERM": "xterm"}, encoding="utf-8",
                         timeout=60, dimensions=(60, 160))


def test_help_and_describe_commands(cluster_factory, tmp_path) -> None:
    """help, \\d and \\d FILE answer from the running controller, as psql's do."""
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    for city, pop, state in [("Monterey", 25000, "CA"), ("Salinas", 150000, "CA"),
                             ("Carmel", 400, "OR"), ("Albany", 2000, "NY")]:
        r.client.execute(f"INSERT (<FILE, Census>, <CITY, {city}>, <POP, {pop}>, "
                         f"<STATE, {state}>)")
    child = spawn_shell(r.cluster.address, tmp_path)
    try:
        child.expect("Type help for help")
        child.expect("mbds>")
        child.send("help\r")
        for line in (r"\[transaction; \.\.\.\]", r"\\d FILE +a file's attributes",
                     r"\\q +quit"):
            child.expect(line)
        child.expect("mbds>")
        child.send("\\d\r")                                 # every file, one row each
        child.expect(r"CENSUS +│ +4 +│ +CITY C, POP A, STATE B +│ +- ")
        child.expect(r"STATES +│ +3 +│ +CODE C ")
        child.expect("mbds>")
        child.send("\\d census\r")                          # names are case-insensitive
        child.expect("file CENSUS")
        # The attributes in their definition's order, FILE first.
        for row in (r"FILE +│ string +│ B \(values\)", r"CITY +│ string +│ C \(each value\)",
                    r"POP +│ integer +│ A \(ranges\)", r"AREA +│ float +│ - ",
                    r"STATE +│ string +│ B \(values\)"):
            child.expect(row)
        child.expect("descriptors of CENSUS")
        # Each directory attribute's descriptors sorted, its no-descriptor class last.
        for row in (r"FILE +│ B +│ = 'CENSUS'", r"CITY +│ C +│ = 'Albany'",
                    r"CITY +│ C +│ = 'Carmel'", r"CITY +│ C +│ = 'Monterey'",
                    r"CITY +│ C +│ = 'Salinas'", r"CITY +│ N +│ no value ",
                    r"POP +│ A +│ 0 \.\. 999 ", r"POP +│ A +│ 1000 \.\. 4999 ",
                    r"POP +│ N +│ any other value, or no value",
                    r"STATE +│ B +│ = 'CA'", r"STATE +│ B +│ = 'NY'",
                    r"STATE +│ N +│ any other value, or no value"):
            child.expect(row)
        child.expect("mbds>")
        child.send("\\d Nowhere\r")
        child.expect("error: .*unknown file NOWHERE")
        child.send("\\d CENSUS STATES\r")
        child.expect(r"error: \\d takes one file name at most; help lists the commands")
        child.send("\\x\r")
        child.expect(r"error: unknown command \\x; help lists the commands")
        child.send("RETRIEVE (FILE = Census) (COUNT(CITY))\r")  # requests still run
        child.expect("examined")
        child.send("\\q\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_describe_bounds_the_descriptors_it_shows(cluster_factory, tmp_path) -> None:
    """A type-C attribute has a descriptor per distinct value: the reply and the screen
    show a bounded number, and say how many there are in all."""
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    n = describe.SHOWN + 7
    r.client.execute("[" + "; ".join(f"INSERT (<FILE, States>, <CODE, S{i:03}>)"
                                      for i in range(n)) + "]")
    s = r.client.status("states")
    # One per value, and the class of records without one (every directory attribute's).
    assert s.descriptor_counts["CODE"] == n + 1 and s.descriptor_counts["FILE"] == 1
    child = spawn_shell(r.cluster.address, tmp_path)
    try:
        child.expect("mbds>")
        child.send("\\d STATES\r")
        child.expect("descriptors of STATES")
        child.expect("mbds>")
        table = child.before
    finally:
        child.close(force=True)
    shown = re.findall(r"CODE +│ C +│ = 'S(\d+)'", table)
    assert shown == [f"{i:03}" for i in range(describe.SHOWN)], table
    assert re.search(rf"CODE +│ +│ … {n + 1 - describe.SHOWN} more", table), table


def test_ctrl_c_cancels_a_running_request_and_the_prompt_comes_back(cluster_factory,
                                                                     tmp_path) -> None:
    """A backend held still (SIGSTOP) keeps a RETRIEVE waiting; Ctrl-C cancels it, as
    psql's does, and the same shell answers the next request once the backend runs."""
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>)")
    backend = r.cluster.backends[1].popen
    child = spawn_shell(r.cluster.address, tmp_path)
    try:
        child.expect("mbds>")
        backend.send_signal(signal.SIGSTOP)
        try:
            child.send("RETRIEVE (FILE = Census) (CITY)\r")
            with pytest.raises(pexpect.TIMEOUT):
                child.expect("Monterey", timeout=1.5)   # waiting on the held backend
            child.sendintr()
            child.expect("cancelled")
            child.expect("mbds>")
        finally:
            backend.send_signal(signal.SIGCONT)
        child.send("RETRIEVE (FILE = Census) (CITY, POP)\r")
        child.expect("25000")
        child.send("\\q\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_input_that_is_not_a_terminal_runs_as_a_script(cluster_factory, tmp_path) -> None:
    """`mbds shell < file` (or a pipe): each request runs once balanced, over lines if
    need be, with no prompt; a failed one is named and the next one runs."""
    import subprocess
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    script = ("INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>)\n"
              "RETRIEVE ((FILE = Census) and\n  (POP > 100)) (CITY, POP)\n"
              "RETRIEVE (FILE = Nowhere) (CITY)\n"
              "\\d\n")
    out = subprocess.run([sys.executable, "-m", "mbds", "shell", "--controller",
                          r.cluster.address], input=script, capture_output=True, text=True,
                         env={"HOME": str(tmp_path), "COLUMNS": "120"}, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Monterey" in out.stdout and "25000" in out.stdout
    assert "CENSUS" in out.stdout                           # \d listed the files
    assert "unknown file NOWHERE" in out.stdout
    assert "mbds>" not in out.stdout and "not a terminal" not in out.stdout + out.stderr
    out = subprocess.run([sys.executable, "-m", "mbds", "shell", "--controller",
                          r.cluster.address], input="\\q\nRETRIEVE (FILE = Nowhere) (CITY)\n",
                         capture_output=True, text=True, env={"HOME": str(tmp_path)},
                         timeout=60)
    assert out.returncode == 0 and "NOWHERE" not in out.stdout, out.stdout + out.stderr
    # --on-error-stop: the script stops at the failed request, with psql's exit code 3.
    out = subprocess.run([sys.executable, "-m", "mbds", "shell", "--controller",
                          r.cluster.address, "--on-error-stop"], input=script,
                         capture_output=True, text=True,
                         env={"HOME": str(tmp_path), "COLUMNS": "120"}, timeout=60)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "unknown file NOWHERE" in out.stdout and "STATES" not in out.stdout   # no \d
    [res] = r.client.execute("RETRIEVE (FILE = Census) (COUNT(CITY))")
    assert res.records == [{"COUNT(CITY)": 2}]              # the INSERT ran again, once


def test_a_script_skips_comment_lines_and_names_where_a_request_failed(cluster_factory,
                                                                       tmp_path) -> None:
    """Lines of -- comments alone are never sent (sent, each would fail, and stop a
    script run with --on-error-stop); a failed request is named by the input line it
    starts on."""
    import subprocess
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>)")
    script = ("-- the cities\n"
              "RETRIEVE (FILE = Census) (CITY)\n"
              "   -- an indented comment\n"
              "\n"
              "RETRIEVE ((FILE = Census) and  -- a comment inside a request\n"
              "  (POP > 100)) (CITY, POP)\n"
              "RETRIEVE ((FILE = Census) and\n"
              "  (POP > 1)) (CTY)\n"
              "-- the end\n")
    out = subprocess.run([sys.executable, "-m", "mbds", "shell", "--controller",
                          r.cluster.address, "--on-error-stop"], input=script,
                         capture_output=True, text=True,
                         env={"HOME": str(tmp_path), "COLUMNS": "200"}, timeout=60)
    assert out.returncode == 3, out.stdout + out.stderr
    assert out.stdout.count("Monterey") == 2 and "25000" in out.stdout, out.stdout
    errors = [line for line in out.stdout.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith("error: line 7 of the input: line 2, "
                                                     "column "), out.stdout
    assert errors[0].endswith("unknown attribute CTY in CENSUS"), out.stdout


def test_ctrl_c_at_the_prompt_discards_what_was_typed(cluster_factory, tmp_path) -> None:
    """As psql's: the shell stays, with a fresh prompt; a comment alone sends nothing."""
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>)")
    child = spawn_shell(r.cluster.address, tmp_path)
    try:
        child.expect("mbds>")
        child.send("RETRIEVE ((FILE = Nowhere) and\r")      # unbalanced: a new line
        child.expect(r"\.\.\.")
        child.sendintr()
        child.expect("mbds>")
        child.send("-- only a comment\r")
        child.expect("mbds>")
        child.send("RETRIEVE (FILE = Census) (CITY)\r")
        child.expect("Monterey")
        child.send("\\q\r")
        child.expect(pexpect.EOF)
        assert "NOWHERE" not in child.before and "error" not in child.before, child.before
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


class FakeClient:
    """Stands in for `mbds.client.Client`: notes each request sent, and refuses one
    naming CTY as the controller would."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, text: str) -> list:
        self.sent.append(text)
        if "CTY" in text:
            raise ClientError("INVALID_ARGUMENT", "line 2, column 17: unknown attribute CTY "
                                                  "in CENSUS")
        return []

    def cancel(self) -> None:
        pass


def fake_client(monkeypatch) -> FakeClient:
    client = FakeClient()
    monkeypatch.setattr(shell, "Client", lambda _address: client)
    return client


def prompts(*answers: str | BaseException):
    """A prompt giving each answer in turn, or raising it: what a person types, Ctrl-C
    (KeyboardInterrupt) or Ctrl-D (EOFError)."""
    left = list(answers)

    def prompt() -> str:
        answer = left.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer
    return prompt


def test_comments_alone_are_never_sent(monkeypatch) -> None:
    """In a script, lines of -- comments alone are skipped (sent, each would fail the
    script under --on-error-stop); one inside a request is sent with it, for the lexer.
    At the prompt a comment alone is dropped as an empty line is."""
    client = fake_client(monkeypatch)
    script = ["-- the cities\n",
              "RETRIEVE (FILE = Census) (CITY)\n",
              "   -- an indented comment\n",
              "\n",
              "RETRIEVE ((FILE = Census) and  -- a comment inside a request\n",
              "-- a comment between its lines\n",
              "  (CITY = '-- a string, not a comment')) (CITY)\n",
              "-- the end\n"]
    assert run_script("nowhere", script, on_error_stop=True)
    assert client.sent == ["RETRIEVE (FILE = Census) (CITY)",
                           "RETRIEVE ((FILE = Census) and  -- a comment inside a request\n"
                           "-- a comment between its lines\n"
                           "  (CITY = '-- a string, not a comment')) (CITY)"]
    client.sent.clear()
    prompt_loop(client, prompts("-- a comment", "-- two\n  -- comments", "  ", EOFError()))
    assert client.sent == []


def test_an_indented_request_is_sent_without_backtracking(monkeypatch) -> None:
    """Telling a request from a line of nothing but blanks and comments takes one pass:
    a pattern that backtracked over every split of the indent would take 2^n steps on
    a request indented n spaces (holding the GIL: asked in a process of its own)."""
    import subprocess
    client = fake_client(monkeypatch)
    assert run_script("nowhere", [" " * 8 + "RETRIEVE (FILE = Census) (CITY)\n"])
    assert client.sent == ["RETRIEVE (FILE = Census) (CITY)"]
    code = ("from cli.shell import NOTHING\n"
            "assert NOTHING.fullmatch(' ' * 200 + 'RETRIEVE') is None\n"
            "assert NOTHING.fullmatch(' ' * 200 + '-- a\\n' * 50)\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_a_script_names_the_line_a_failed_request_starts_on(monkeypatch, capsys) -> None:
    """`line N of the input: ` before the server's message, which names the place
    inside the request; the next request still runs. Not at the prompt."""
    client = fake_client(monkeypatch)
    script = ["RETRIEVE (FILE = Census) (CITY)\n",
              "\n",
              "RETRIEVE ((FILE = Census) and\n",
              "  (POP > 1)) (CTY)\n",
              "RETRIEVE (FILE = Census) (CITY)\n",
              "RETRIEVE ((FILE = Census) and\n",      # unbalanced at the end: sent as it is
              "  (POP > 1)) (CTY\n"]
    assert run_script("nowhere", script)
    assert len(client.sent) == 4
    out = " ".join(capsys.readouterr().out.split())         # as rich wrapped it, unwrapped
    assert out == ("error: line 3 of the input: line 2, column 17: unknown attribute CTY in "
                   "CENSUS error: line 6 of the input: line 2, column 17: unknown attribute "
                   "CTY in CENSUS"), out
    prompt_loop(client, prompts("RETRIEVE ((FILE = Census) and\n  (POP > 1)) (CTY)",
                                EOFError()))
    out = " ".join(capsys.readouterr().out.split())
    assert out == "error: line 2, column 17: unknown attribute CTY in CENSUS", out


def test_ctrl_c_at_the_prompt_loop_discards_and_prompts_again() -> None:
    """Ctrl-C at the prompt (KeyboardInterrupt from it) gives a fresh prompt, as psql's;
    Ctrl-D, \\q, quit and exit leave."""
    client = FakeClient()
    prompt_loop(client, prompts(KeyboardInterrupt(), "RETRIEVE (FILE = Census) (CITY)",
                                KeyboardInterrupt(), KeyboardInterrupt(), EOFError()))
    assert client.sent == ["RETRIEVE (FILE = Census) (CITY)"]
    for leave in ("\\q", "quit", "exit", EOFError()):
        prompt = prompts(KeyboardInterrupt(), leave, "RETRIEVE (FILE = Census) (CITY)")
        prompt_loop(client, prompt)
        assert len(client.sent) == 1                        # left before the request
