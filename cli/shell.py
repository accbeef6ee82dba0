"""`mbds shell`: an interactive ABDL prompt (prompt_toolkit) with history and multi-line input.

Enter runs the request once its brackets and quotes are balanced; until then it
starts a new line, so a long RETRIEVE or a transaction can be typed over
several lines.
"""

from __future__ import annotations

from pathlib import Path

import click
from prompt_toolkit import PromptSession
from prompt_toolkit.history import FileHistory
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent

from cli.options import controller_option
from cli.tables import console, render_result
from mbds.client import Client, ClientError

HELP = """Type an ABDL request or a [transaction; ...]; Enter runs it when balanced.
Commands: \\q (quit), \\s (status), \\h (this help)."""


@click.command()
@controller_option
def shell(controller: str) -> None:
    """Interactive ABDL prompt with history, multi-line input and tables."""
    run_shell(controller)


def run_shell(address: str) -> None:
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

    session: PromptSession = PromptSession(history=FileHistory(str(history)),
                                           multiline=True, key_bindings=kb)
    console.print(f"connected to {address}. {HELP}")
    with Client(address) as client:
        while True:
            try:
                text = session.prompt("mbds> ", prompt_continuation="  ... ").strip()
            except (EOFError, KeyboardInterrupt):
                break
            if not text:
                continue
            if text in ("\\q", "quit", "exit"):
                break
            if text == "\\h":
                console.print(HELP)
                continue
            try:
                if text == "\\s":
                    s = client.status()
                    for b in s.backends:
                        console.print(f"{b.name} {b.address} "
                                      f"{'up' if b.reachable else 'DOWN ' + b.error}")
                    continue
                for r in client.execute(text):
                    render_result(r)
            except ClientError as e:
                console.print(f"error: {e}", style="red")


def _complete(text: str) -> bool:
    # '<' and '>' are also comparison operators, so only (), [], {} and quotes decide.
    return text.count("(") == text.count(")") and text.count("[") == text.count("]") \
        and text.count("{") == text.count("}") and text.count("'") % 2 == 0 \
        and text.count('"') % 2 == 0
