"""A child process's output read line by line with a deadline on every read."""

from __future__ import annotations

import queue
import subprocess
import threading
import time


class OutputLines:
    """Lines of `proc.stdout`, pumped by a thread so that no read blocks past a deadline."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._proc = proc
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def next(self, deadline: float) -> str | None:
        """The next line, or None at the end of the output or at the deadline (monotonic)."""
        try:
            return self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def until(self, text: str, timeout: float) -> list[str]:
        """Lines up to and including the first that holds `text` (all read if none does)."""
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while (line := self.next(deadline)) is not None:
            seen.append(line)
            if text in line:
                break
        return seen
