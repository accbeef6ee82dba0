"""Ctrl-C under a command that can end cleanly at its next step (a load at the end of
the batches it has sent, a dump at the end of a row batch): the first asks it to, so
that what it says it stored or wrote is exact; a second leaves at once."""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

import click


class TwoStepInterrupt:
    """SIGINT while in the `with`: the first sets `asked` (and says `said` on stderr),
    a second raises KeyboardInterrupt. Once asked, SIGINT stays ignored after it: the
    command exits next, and a Ctrl-C meanwhile would end it with a traceback."""

    def __init__(self, said: str = "", then: threading.Event | None = None) -> None:
        self.asked = threading.Event()
        self.said = said
        self.then = then            # set with `asked` (e.g. the end of a load's input)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.asked.is_set():
            raise KeyboardInterrupt
        self.asked.set()
        if self.then is not None:
            self.then.set()
        if self.said:
            click.echo(self.said, err=True)

    def __enter__(self) -> TwoStepInterrupt:
        self._previous = signal.signal(signal.SIGINT, self._on_signal)
        return self

    def __exit__(self, kind: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN if self.asked.is_set() else self._previous)
