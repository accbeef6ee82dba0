"""The plots of a `mbds bench paper` run: response times, improvement and reduction beside
the paper's figures, and speedup and scaleup in DeWitt and Gray's terms.

DeWitt and Gray ("Parallel database systems", 1992): speedup = T(1)/T(n), the same job
on n times the hardware (here A.E against B_n.E; linear is n); scaleup = T(A)/T(C_n),
an n times bigger job on n times the hardware (linear is 1). The paper's improvement
is 1 − 1/speedup and its reduction 1/scaleup − 1, so the plots tell the same story
in the terms the parallel-database literature uses.
"""

from __future__ import annotations

from pathlib import Path

from loadgen.formulas import (
    PAPER_IMPROVEMENT,
    PAPER_REDUCTION,
    improvement,
    improvement_bound,
    reduction,
)
from loadgen.paper_parts import busiest
from loadgen.paper_results import ConfigResult


def _bars(ax, by: dict[str, ConfigResult], reqs: list[int], ns: list[int], kind: str,
          paper: dict[int, float | None]) -> None:
    """Ours for each n, then the paper's 1→2 (hatched) where its scan is legible."""
    fn = improvement if kind == "B" else reduction
    ns = [n for n in ns if f"{kind}{n}.E" in by]
    width = 0.8 / (len(ns) + 1)
    for k, n in enumerate(ns):
        ys = [fn(by["A.E"].mean(q), by[f"{kind}{n}.E"].mean(q)) for q in reqs]
        ax.bar([q + k * width for q in reqs], ys, width, label=f"ours 1→{n}")
        if kind == "B":
            ax.axhline(improvement_bound(n), linestyle="--", linewidth=1, color="gray")
    known = [q for q in reqs if paper.get(q) is not None]
    ax.bar([q + len(ns) * width for q in known], [paper[q] for q in known], width,
           label="paper 1→2 (1985)", color="white", edgecolor="black", hatch="//")
    ax.set_xticks([q + width * len(ns) / 2 for q in reqs], [str(q) for q in reqs])
    ax.legend(fontsize=8)


def _speedup_scaleup(ax_speed, ax_scale, by: dict[str, ConfigResult], reqs: list[int],
                     ns: list[int]) -> None:
    a = by["A.E"]
    for q in reqs:
        bs = [n for n in ns if f"B{n}.E" in by]
        line, = ax_speed.plot([1] + bs, [1.0] + [a.mean(q) / by[f"B{n}.E"].mean(q)
                                                 for n in bs], marker="o", label=f"{q}")
        cpu = [n for n in bs if a.backend_cpu_ms.get(q) and by[f"B{n}.E"].backend_cpu_ms.get(q)]
        if cpu:      # the same from the busiest backend's CPU: the work itself
            ax_speed.plot([1] + cpu, [1.0] + [busiest(a, q) / busiest(by[f"B{n}.E"], q)
                                              for n in cpu],
                          linestyle=":", color=line.get_color())
        cs = [n for n in ns if f"C{n}.E" in by]
        ax_scale.plot([1] + cs, [1.0] + [a.mean(q) / by[f"C{n}.E"].mean(q) for n in cs],
                      marker="o", label=f"{q}")
    xs = [1] + ns
    ax_speed.plot(xs, xs, color="gray", linestyle="--", linewidth=1, label="linear")
    ax_scale.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="linear")
    ax_speed.set(xlabel="backends n", ylabel="speedup T(A) / T(B_n)", xticks=xs,
                 title="Speedup (dotted: busiest backend's CPU)")
    ax_scale.set(xlabel="backends n (n× the data)", ylabel="scaleup T(A) / T(C_n)",
                 xticks=xs, title="Scaleup")
    ax_speed.legend(fontsize=7, ncol=2, title="request", title_fontsize=7)
    ax_scale.legend(fontsize=7, ncol=2, title="request", title_fontsize=7)


def draw(out: Path, meta: dict, results: list[ConfigResult]) -> list[str]:
    """Write the plots into `out`; their file names."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    by = {r.config.name: r for r in results}
    ns = [n for n in meta["backends"] if n > 1 and f"B{n}.E" in by]
    reqs = meta["requests"]
    files = []
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for q in reqs:
        ax.plot([1] + ns, [by["A.E"].mean(q)] + [by[f"B{n}.E"].mean(q) for n in ns],
                marker="o", label=f"request {q}")
    ax.set(xlabel="backends", ylabel="mean response time (ms)", yscale="log",
           title="Same database, more backends", xticks=[1] + ns)
    ax.legend(fontsize=7, ncol=3)
    files.append("response_time.png")
    fig.tight_layout()
    fig.savefig(out / files[-1], dpi=110)
    for name, kind, paper, title, ylabel in [
            ("improvement.png", "B", PAPER_IMPROVEMENT,
             "Improvement against its bound (1 - 1/n), beside the paper's", "improvement (%)"),
            ("reduction.png", "C", PAPER_REDUCTION,
             "Reduction: n backends, n× the data (ideal 0), beside the paper's",
             "reduction (%)")]:
        if kind == "C" and not any(f"C{n}.E" in by for n in ns):
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        _bars(ax, by, reqs, ns, kind, paper)
        ax.set(xlabel="request", ylabel=ylabel, title=title)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        files.append(name)
    fig, (ax_speed, ax_scale) = plt.subplots(1, 2, figsize=(11, 4.5))
    _speedup_scaleup(ax_speed, ax_scale, by, reqs, ns)
    fig.suptitle("Speedup and scaleup (DeWitt and Gray), from mean response times")
    fig.tight_layout()
    files.append("speedup_scaleup.png")
    fig.savefig(out / files[-1], dpi=110)
    plt.close("all")
    return files
