"""What `mbds bench paper` prints: the claims at a glance beside the paper's figures, the
verdicts, and where the full report is — within 100 columns, no figure ever cut.

Tables 3–8 stay in report.md (or on the terminal with --tables): they are too wide
for a terminal, and rich shortens what does not fit with "…" in place of figures.
Here every column of figures is as wide as its widest figure and nothing overflows
into an ellipsis; on a narrower terminal a figure folds onto the next line instead.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from rich import box
from rich.console import Console
from rich.table import Table

from loadgen import paper_targets
from loadgen.formulas import PAPER_IMPROVEMENT, PAPER_REDUCTION, improvement, reduction
from loadgen.paper_results import ConfigResult

WIDTH = 100         # what the printed summary is made to fit
SUMMARY = ["claims", "verdict_figures", "verdicts"]     # printed last, so seen first


def console_for_summary(file: IO[str] | None = None) -> Console:
    """A console at most WIDTH wide: the terminal's width if narrower, WIDTH when the
    output is not a terminal (rich would otherwise assume 80 and cut)."""
    probe = Console(file=file)
    set_by_user = "COLUMNS" in os.environ or probe.is_terminal
    return Console(file=file, width=min(probe.width, WIDTH) if set_by_user else WIDTH)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}%"


def show(console: Console, t: dict) -> None:
    """The title as a paragraph of the console's width (a table's own title wraps to the
    table's width, a narrow column on a narrow table), then the table."""
    console.print(t["title"], style="bold", highlight=False)
    console.print(render(t))


def render(t: dict) -> Table:
    """A table of the report's shape ({"title", "columns", "rows"}) for the terminal,
    untitled: the first column left, the rest right-aligned; text wraps at spaces, and
    nothing ever turns into an ellipsis."""
    out = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for k, name in enumerate(t["columns"]):
        out.add_column(name, justify="left" if k < t.get("text_columns", 1) else "right",
                       overflow="fold")
    for row in t["rows"]:
        out.add_row(*row)
    return out


def claims_table(by: dict[str, ConfigResult], reqs: list[int], ns: list[int]) -> dict | None:
    """Per request: improvement and reduction 1→n from mean response times beside the
    paper's 1→2 figures, and the machine's part of the reduction (A×n against A)."""
    if "A.E" not in by:
        return None
    a = by["A.E"]
    bs = [n for n in ns if f"B{n}.E" in by]
    cs = [n for n in ns if f"C{n}.E" in by]
    xs = [n for n in cs if f"Ax{n}.E" in by]
    rows = []
    for q in reqs:
        row = [str(q)]
        for n in bs:
            row.append(_pct(improvement(a.mean(q), by[f"B{n}.E"].mean(q))))
            if n == 2:
                row.append(_pct(PAPER_IMPROVEMENT.get(q)))
        for n in cs:
            row.append(_pct(reduction(a.mean(q), by[f"C{n}.E"].mean(q))))
            if n == 2:
                row.append(_pct(PAPER_REDUCTION.get(q)))
        row += [_pct(reduction(a.mean(q), by[f"Ax{n}.E"].mean(q))) for n in xs]
        rows.append(row)
    columns = ["request"]
    for n in bs:
        columns += [f"improvement\n1→{n}"] + (["paper\n1→2"] if n == 2 else [])
    for n in cs:
        columns += [f"reduction\n1→{n}"] + (["paper\n1→2"] if n == 2 else [])
    columns += [f"machine\n1→{n}" for n in xs]
    return {"title": "The claims at a glance: response-time means, ours beside the paper's "
                     "(1985, 1000 records); the machine's part is A×n against A. No "
                     "verdict: on a shared machine these move with its load.",
            "columns": columns, "rows": rows}


def verdict_figures(by: dict[str, ConfigResult], reqs: list[int], ns: list[int]
                    ) -> dict | None:
    """Per request, the figures the verdicts (a) and (b) are taken on."""
    cpu = [n for n in ns if all(paper_targets.cpu_speedup(by, q, n) is not None
                                for q in reqs)]
    own = [n for n in ns if all(paper_targets.own_part(by, q, n) is not None for q in reqs)]
    if not cpu and not own:
        return None
    rows = [[str(q)] + [_pct(paper_targets.cpu_speedup(by, q, n)) for n in cpu]
            + [_pct(paper_targets.own_part(by, q, n)) for n in own] for q in reqs]
    return {"title": "The verdicts' figures: (a) improvement from the busiest backend's "
                     "CPU ms (means), (b) MBDS's part of the reduction, C_n against A×n "
                     "(medians, % of A)",
            "columns": ["request"] + [f"(a) CPU\n1→{n}" for n in cpu]
            + [f"(b) MBDS\n1→{n}" for n in own], "rows": rows}


def table2_table(t2: dict) -> dict:
    """Table 2 of a loaded cluster (`mbds paper table2`) beside the paper's counts."""
    rows = [[str(r["request"]), str(r["clusters_examined"]), str(r["paper_clusters"]),
             str(r["records_retrieved"]), str(r["paper_records"]),
             "yes" if r["match"] else "NO", f"{r['median_ms']:.2f}"] for r in t2["rows"]]
    where = f", {t2['backends']} backends" if t2.get("backends") else ""
    return {"title": f"Table 2 (scale {t2['scale']}, multi {t2['multi']}{where}), "
                     "beside the paper's counts; " + (
                         f"median of {t2['runs']} runs" if t2["runs"] != 1 else "1 run")
                     + (f" after {t2['warmup']} untimed" if t2.get("warmup") else ""),
            "columns": ["request", "clusters\nexamined", "paper", "records\nretrieved",
                        "paper", "match", "median\nms"], "rows": rows}


def print_summary(console: Console, tables: dict[str, dict], out: Path | None,
                  plots: list[str], *, all_tables: bool = False) -> None:
    """The claims at a glance, the verdicts' figures, the verdicts, and where the rest is."""
    first = SUMMARY if not all_tables else [n for n in tables if n not in SUMMARY] + SUMMARY
    for name in first:
        if name in tables:
            show(console, tables[name])
    if "verdicts" not in tables:
        console.print("No verdict: this run lacks the configurations they are taken on "
                      "(A.E, B_n.E with CPU counts; A×n with --control).")
    if out is not None:     # a path alone on its line: it wraps only if longer than one
        console.print("Full report (Tables 3–8 and every run) and plots, in", out,
                      highlight=False)
        console.print(f"  {out / 'report.md'}", "  " + ", ".join(plots or []), sep="\n",
                      highlight=False)
    if not all_tables:
        console.print("All tables on the terminal: --tables")
