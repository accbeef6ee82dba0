"""What `mbds bench paper` prints fits 100 columns and cuts no figure: the summary of a
recorded run (tests/data/paper_results_small.json: three runs of each request on A,
B_n, C_n and A×n at scale 100, and a Table 2 of two local backends) is printed with
COLUMNS=100, and every figure it stands for — computed here again from the runs —
appears whole in the output, with no "…" anywhere."""

from __future__ import annotations

import io
import json
import re
import statistics
from pathlib import Path

import pytest

from loadgen import paper_report
from loadgen.formulas import (
    PAPER_IMPROVEMENT,
    PAPER_REDUCTION,
    improvement,
    mbds_part,
    reduction,
)
from loadgen.paper_results import Config, ConfigResult
from loadgen.paper_summary import console_for_summary, show, table2_table

FIXTURE = Path(__file__).parent / "data" / "paper_results_small.json"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _load() -> tuple[dict, list[ConfigResult]]:
    d = json.loads(FIXTURE.read_text())
    configs = {c["name"]: Config(**c) for c in d["meta"]["configs"]}
    results = []
    for r in d["results"]:
        res = ConfigResult(configs[r["config"]], load_s=r["load_s"])
        for key, s in r["requests"].items():
            q = int(key)
            res.times_ms[q], res.records[q] = s["runs_ms"], s["records"]
            res.clusters[q] = s["clusters_examined"]
            res.backend_ms[q] = [(m, x) for m, x in s["backend_ms"]]
            res.backend_cpu_ms[q] = [(m, x) for m, x in s["backend_cpu_ms"]]
        results.append(res)
    return d["meta"], results


def _printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns: int,
             all_tables: bool = False) -> tuple[str, dict, list[ConfigResult]]:
    monkeypatch.setenv("COLUMNS", str(columns))
    meta, results = _load()
    buf = io.StringIO()
    paper_report.write(tmp_path, meta, results, console_for_summary(buf),
                       all_tables=all_tables)
    return buf.getvalue(), meta, results


def _whole(figure: str, text: str) -> bool:
    """`figure` appears in `text` as a figure of its own, not part of a longer one."""
    return re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d.])", text) is not None


def _expected(meta: dict, results: list[ConfigResult]) -> list[str]:
    """Every figure the summary stands for, from the runs themselves."""
    by = {r.config.name: r for r in results}

    def mean(name: str, q: int) -> float:
        return statistics.fmean(by[name].times_ms[q])

    def median(name: str, q: int) -> float:
        return statistics.median(by[name].times_ms[q])

    def cpu(name: str, q: int) -> float:
        return statistics.fmean(x for _, x in by[name].backend_cpu_ms[q])

    out = []
    for q in meta["requests"]:
        for n in (2, 4):
            out += [improvement(mean("A.E", q), mean(f"B{n}.E", q)),
                    reduction(mean("A.E", q), mean(f"C{n}.E", q)),
                    reduction(mean("A.E", q), mean(f"Ax{n}.E", q)),
                    improvement(cpu("A.E", q), cpu(f"B{n}.E", q)),
                    mbds_part(median("A.E", q), median(f"Ax{n}.E", q),
                              median(f"C{n}.E", q))]
        out += [v for v in (PAPER_IMPROVEMENT[q], PAPER_REDUCTION[q]) if v is not None]
    figures = [f"{v:.2f}%" for v in out]
    [r1] = [r for r in meta["table2"]["rows"] if r["request"] == 1]
    return figures + [f"{r1['median_ms']:.2f}"]      # verdict (c), from Table 2


def test_summary_fits_100_columns_and_cuts_no_figure(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    text, meta, results = _printed(tmp_path, monkeypatch, 100)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 100
    missing = [f for f in _expected(meta, results) if not _whole(f, text)]
    assert not missing, missing
    # …and every figure of the printed tables' own rows, the verdicts' ranges included.
    tables = json.loads((tmp_path / "summary.json").read_text())["tables"]
    for name in ("claims", "verdict_figures", "verdicts"):
        for row in tables[name]["rows"]:
            for cell in row[1:]:
                for figure in NUMBER.findall(cell):
                    assert _whole(figure, text), (name, cell)
    assert "(a) CPU improvement 1→2" in " ".join(text.split())
    assert str(tmp_path / "report.md") in text and "speedup_scaleup.png" in text
    # All of Tables 3–8 stay in report.md, not on the terminal.
    report = (tmp_path / "report.md").read_text()
    for title in ("Table 2 (scale 1", "Table 3.", "Table 4.", "Table 5.", "Verdicts",
                  "The claims at a glance", "Speedup T(A)/T(B_n)", "against the machine"):
        assert title in report, title
    assert "Table 3." not in text and "Table 5 against the machine" not in text
    for name in ("improvement.png", "reduction.png", "speedup_scaleup.png"):
        assert (tmp_path / name).stat().st_size > 0


def test_every_table_with_tables_flag_and_a_narrow_terminal_never_ellipsis(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--tables prints all of them; on 60 columns a figure may fold, never turn into "…"."""
    text, _, _ = _printed(tmp_path, monkeypatch, 60, all_tables=True)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 60
    assert "Table 3." in text and "Table 5 against the machine" in text


def test_table2_fits_100_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    t2 = json.loads(FIXTURE.read_text())["meta"]["table2"]
    buf = io.StringIO()
    show(console_for_summary(buf), table2_table(t2))
    text = buf.getvalue()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 100
    for r in t2["rows"]:
        line = next(x for x in text.splitlines() if x.split()[:1] == [str(r["request"])])
        assert line.split()[1:] == [str(r["clusters_examined"]), str(r["paper_clusters"]),
                                    str(r["records_retrieved"]), str(r["paper_records"]),
                                    "yes", f"{r['median_ms']:.2f}"]
