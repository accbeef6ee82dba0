"""Readable tables for results (rich)."""

from __future__ import annotations

import errno

from rich.console import Console
from rich.table import Table
from rich.text import Text

from mbds.client import Result


class Output(Console):
    """rich's console on standard output. Its reader leaving (`mbds shell < f | head`)
    ends the command as `cli/main.py` ends any whose reader left, not with rich's exit
    code 1, which would read as the command's failure."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "the reader of standard output left")


console = Output()
NULL = Text("(null)", style="dim")


def render_result(r: Result, *, max_rows: int = 200) -> None:
    s = r.stats
    if r.columns and r.op in ("RETRIEVE", "RETRIEVE_COMMON"):
        t = Table(show_lines=False)
        for c in r.columns:
            # Folded, not cut with an ellipsis: 1.2345678901234567e+300 cut to
            # "1.23456789012345…" would read as a value near 1.
            t.add_column(c, overflow="fold")
        for rec in r.records[:max_rows]:
            # Text, not str: a stored value is shown as it is, never read as markup. A
            # null is shown as psql's `\pset null '(null)'` does, apart from ''.
            t.add_row(*(NULL if rec.get(c) is None else Text(str(rec.get(c)))
                        for c in r.columns))
        console.print(t)
        if len(r.records) > max_rows:
            console.print(f"… {len(r.records) - max_rows} more records (use --json for all)")
    per = ", ".join(f"{b['backend']}: {b['records']} in {b['elapsed_ms']:.1f} ms"
                    for b in s.get("backends", []))
    # markup=False: the brackets are text, not a style for rich to swallow.
    console.print(f"{r.op}: {_count(s.get('records_retrieved', 0), 'record')}, "
                  f"{_count(s.get('clusters_examined', 0), 'cluster')} examined, "
                  f"{r.elapsed_ms:.1f} ms" + (f"  [{per}]" if per else ""),
                  style="dim", markup=False, highlight=False, soft_wrap=True)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
