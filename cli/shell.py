"""`mbds shell`: an interactive ABDL prompt (prompt_toolkit) with history and multi-line input.

Enter runs the request once its brackets and quotes are balanced; until then it
starts a new line, so a long RETRIEVE or a transaction can be typed over
several lines. Ctrl-C while a request runs cancels it and the prompt comes back;
at the prompt it discards what was typed, as psql's does. Input that is not a terminal
is read as a script: each request runs once balanced, comments and blank lines alone
are skipped, and a request that fails is named by the line it starts on.
Backslash commands answer the first questions as psql's do
(`help`, `\\d`, `\\d FILE`), from the controller's Status.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import click
from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from cli.describe import describe_file, list_files
from cli.options import NotUtf8, controller_option, printable, utf8
from cli.supervise import in_thread
from cli.tables import console, render_result
from mbds.client import Client, ClientError, Result
from mbds.errors import shorten

HELP = """Type an ABDL request or a [transaction; ...]; Enter runs it when balanced.
  \\d          list the files
  \\d FILE     a file's attributes, types, directory attributes and descriptors
  \\s          the backends and whether each is up
  help, \\?    this help (also \\h)
  \\q          quit (also quit, exit, Ctrl-D)
Ctrl-C while a request runs cancels it; at the prompt it discards what was typed."""
HELP_WORDS = ("help", "\\?", "\\h")
# A request sent because its brackets balanced, which the parser found cut short, was
# most likely meant to go on over the next line: its error says where to break lines.
CUT_SHORT = "found end of input"
GO_ON = (" (the shell sends a request once its brackets balance: begin a RETRIEVE's "
         "target list on the line its query ends on)")


# The exit code of a script stopped by --on-error-stop, psql's for ON_ERROR_STOP.
STOPPED_ON_ERROR = 3
# Text that is only whitespace and -- comments: nothing to send. Possessive, as the
# lexer's: a nested `\s+` would backtrack exponentially on an indented request.
NOTHING = re.compile(r"(?:\s++|--[^\n]*+)*+")


@click.command()
@controller_option
@click.option("--on-error-stop", is_flag=True,
              help="Input that is not a terminal: stop at the first request that fails, "
                   f"with exit code {STOPPED_ON_ERROR} (by default it is named and the "
                   "next one runs, exit code 0, as psql does).")
def shell(controller: str, on_error_stop: bool) -> None:
    """Interactive ABDL prompt: history, multi-line input, tables.

    Enter sends a request once its brackets balance; `help` lists the commands."""
    run_shell(controller, on_error_stop)


def run_shell(address: str, on_error_stop: bool = False) -> None:
    if not sys.stdin.isatty():
        if not run_script(address, sys.stdin, on_error_stop):
            sys.exit(STOPPED_ON_ERROR)
        return
    history = Path.home() / ".mbds" / "history"
    history.parent.mkdir(parents=True, exist_ok=True)
    kb = KeyBindings()

    @kb.add("enter")
    def _(event: KeyPressEvent) -> None:
        buf = event.current_buffer
        text = buf.text.strip()
        if not text or text.startswith("\\") or _complete(text):
            buf.validate_and_handle()
        else:
            buf.insert_text("\n")

    session: PromptSession = PromptSession(history=History(str(history)),
                                           multiline=True, key_bindings=kb)
    console.print(f"connected to {address}. Type help for help.")
    with Client(address) as client:
        prompt_loop(client, lambda: session.prompt("mbds> ", prompt_continuation="  ... "))


def prompt_loop(client: Client, prompt: Callable[[], str]) -> None:
    """Read and answer until \\q or Ctrl-D; Ctrl-C discards what was typed."""
    while True:
        try:
            text = prompt().strip()
        except KeyboardInterrupt:
            continue
        except EOFError:
            break
        if NOTHING.fullmatch(text):
            continue
        if text in ("\\q", "quit", "exit"):
            break
        answer(client, text)


def run_script(address: str, lines: Iterable[str], on_error_stop: bool = False) -> bool:
    """Input that is not a terminal (`mbds shell < requests.abdl`, a pipe): each request
    run as soon as its brackets are balanced, as Enter would, with no prompt or line
    editing; it ends at the end of the input or at \\q. A request that fails is named
    and the next one runs, as psql does with a script; with `on_error_stop` the script
    stops there instead, and False is returned."""
    pending, start = "", 0
    with Client(address) as client:
        for n, line in enumerate(lines, 1):
            if not pending and NOTHING.fullmatch(line):
                continue            # a blank or comment line between requests
            if not pending:
                start = n
            pending = f"{pending}\n{line.rstrip()}" if pending else line.strip()
            text = pending.strip()
            if text in ("\\q", "quit", "exit"):
                pending = ""
                break
            if text.startswith("\\") or text.lower() in HELP_WORDS or _complete(text):
                pending = ""
                if not answer(client, text, f"line {start} of the input: ") \
                        and on_error_stop:
                    return False
        if pending.strip():
            return answer(client, pending.strip(), f"line {start} of the input: ") \
                or not on_error_stop
    return True


def answer(client: Client, text: str, where: str = "") -> bool:
    """Run one line's request or command and show what it gives, or why it failed
    (False), after `where` it came from ("line 7 of the input: ")."""
    try:
        text = utf8(text, where.removesuffix(": ") or "the line")
        if text.lower() in HELP_WORDS:
            console.print(HELP, markup=False, highlight=False)
        elif text.startswith("\\"):
            return command(client, text)
        else:
            for r in execute_cancellable(client, text):
                render_result(r)
    except (NotUtf8, ClientError) as e:
        said = f"error: {e}" if isinstance(e, NotUtf8) else f"error: {where}{e}"
        if isinstance(e, ClientError) and str(e).endswith(CUT_SHORT) and _complete(text):
            said += GO_ON
        console.print(printable(said), style="red", markup=False, highlight=False,
                      soft_wrap=True)
        return False
    return True


class History(FileHistory):
    """prompt_toolkit's history file, which also keeps a line that is not UTF-8 (a byte
    it could not decode is a surrogate escape, which its own writer refuses) with that
    byte replaced, as the file is read back anyway."""

    def store_string(self, string: str) -> None:
        super().store_string(string.encode("utf-8", "replace").decode("utf-8"))


def execute_cancellable(client: Client, text: str) -> list[Result]:
    """`client.execute(text)`, which Ctrl-C cancels and the prompt comes back, as psql's.
    The request runs in a thread of its own (`cli/supervise.in_thread`): Ctrl-C raised
    in the thread reading the reply could leave a lock inside gRPC broken."""
    cancelled: list[int] = []

    def cancel(signum: int, _worker: object) -> None:
        cancelled.append(signum)
        client.cancel()
    try:
        return in_thread(lambda: client.execute(text), cancel, (signal.SIGINT,))
    except ClientError:
        if cancelled:
            raise ClientError("CANCELLED", "cancelled (Ctrl-C); a write under way is done "
                              "on every backend or on none: read before repeating it"
                              ) from None
        raise


def command(client: Client, text: str) -> bool:
    """One backslash command; a wrong one is named, with where to find the right ones
    (False)."""
    name, *args = text.split()
    if name == "\\d" and len(args) <= 1:
        s = client.status(args[0] if args else "")
        if args:
            describe_file(s, args[0])
        else:
            list_files(s)
    elif name == "\\s" and not args:
        for b in client.status().backends:
            console.print(f"{b.name} {b.address} {'up' if b.reachable else 'DOWN ' + b.error}",
                          markup=False)
    else:
        usage = {"\\d": "\\d takes one file name at most", "\\s": "\\s takes nothing"}
        console.print(f"error: {usage.get(name) or 'unknown command ' + shorten(name, 20)}; "
                      "help lists the commands", style="red", markup=False, highlight=False)
        return False
    return True


def _complete(text: str) -> bool:
    """Whether Enter sends the text: every ( and [ closed. Quoted strings (with their
    backslash escapes), record bodies ({...}, with \\}) and -- comments are skipped, so
    a quote or bracket inside them does not count; '<' and '>' are also comparison
    operators, so they decide nothing. An unclosed quote or body is sent as it is, for
    the server to name (a string may not span lines)."""
    depth, i, n = 0, 0, len(text)
    while i < n:
        ch = text[i]
        if ch in "'\"{":
            close = "}" if ch == "{" else ch
            i += 1
            while i < n and text[i] != close:
                i += 2 if text[i] == "\\" else 1
            if i >= n:
                return ch != "{"          # a body may span lines; a string may not
        elif text.startswith("--", i):
            end = text.find("\n", i)
            if end < 0:
                break
            i = end
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        i += 1
    return depth <= 0
