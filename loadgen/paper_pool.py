"""`mbds bench paper-pool`: Tables 3–8 over several runs of the same `mbds bench paper`.

On a shared machine the improvement of one 40-run benchmark moves by a few points
from one run to the next (slow spells of the VM last longer than a round of the
interleaved runs). Pooling repeated benchmarks — every run of every folder counts
once, as if one benchmark had made them all — gives means with a smaller error,
computed by the same code as a single benchmark's report.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import click

from loadgen import paper_report
from loadgen.paper_results import Config, ConfigResult, write_json
from loadgen.paper_summary import console_for_summary

console = console_for_summary()     # 100 columns, as `mbds bench paper` prints

# What must agree for runs to be pooled: the same database, requests and machine shape.
SAME = ("scale", "record_bytes", "requests", "backends")


def _load(folder: Path) -> tuple[dict, dict]:
    try:
        meta = json.loads((folder / "meta.json").read_text())
        summary = json.loads((folder / "summary.json").read_text())
        with (folder / "runs.csv").open(newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError as e:
        raise click.ClickException(f"{folder} is not a `mbds bench paper` results folder "
                                   f"(missing {Path(e.filename).name})") from None
    return meta, {"summary": summary, "rows": rows}


def _check(first: dict, meta: dict, folder: Path) -> None:
    for key in SAME:
        if meta[key] != first[key]:
            raise click.ClickException(f"{folder}: {key} is {meta[key]}, the first folder's "
                                       f"is {first[key]}; only runs of one command pool")
    names, first_names = ([c["name"] for c in m["configs"]] for m in (meta, first))
    if names != first_names:
        raise click.ClickException(f"{folder}: its configurations are {', '.join(names)}, "
                                   f"the first folder's {', '.join(first_names)}")
    for key, default in (("backend_cpus", None), ("split_search_from", 1)):
        mine, theirs = meta["machine"].get(key, default), first["machine"].get(key, default)
        if mine != theirs:
            raise click.ClickException(f"{folder}: {key} is {mine}, the first folder's "
                                       f"is {theirs}")


def pool(folders: list[Path]) -> tuple[dict, list[ConfigResult]]:
    """The pooled meta and per-configuration results of `folders`."""
    loaded = [(f, *_load(f)) for f in folders]
    first = loaded[0][1]
    results = {c["name"]: ConfigResult(Config(**c)) for c in first["configs"]}
    handlers: dict[tuple[str, int], dict[tuple, list[dict]]] = {}
    for folder, meta, data in loaded:
        _check(first, meta, folder)
        for row in data["rows"]:
            r = results.get(row["config"])
            if r is None:
                raise click.ClickException(f"{folder}: configuration {row['config']} is not "
                                           "in the first folder")
            q = int(row["request"])
            r.times_ms.setdefault(q, []).append(float(row["response_ms"]))
            r.backend_ms.setdefault(q, []).append(
                (float(row["recp_mean_ms"]), float(row["recp_slowest_ms"])))
            if row["cpu_mean_ms"]:
                r.backend_cpu_ms.setdefault(q, []).append(
                    (float(row["cpu_mean_ms"]), float(row["cpu_busiest_ms"])))
            r.records[q], r.clusters[q] = int(row["records"]), int(row["clusters_examined"])
        for res in data["summary"]["results"]:
            for q, rows in res["handlers"].items():
                for h in rows:
                    key = (h["process"], h["handler"], h["backend"])
                    handlers.setdefault((res["config"], int(q)), {}).setdefault(
                        key, []).append(h)
    for (name, q), by_key in handlers.items():   # Table 8: each folder's means, averaged
        results[name].handlers[q] = [
            {"process": k[0], "handler": k[1], "backend": k[2],
             "mean_ms": sum(h["mean_ms"] for h in hs) / len(hs),
             "calls_per_request": sum(h["calls_per_request"] for h in hs) / len(hs)}
            for k, hs in sorted(by_key.items())]
    for r in results.values():     # a CPU table only where every run had CPU counts
        if any(len(r.backend_cpu_ms.get(q, [])) != len(t) for q, t in r.times_ms.items()):
            r.backend_cpu_ms.clear()
    runs = {len(t) for r in results.values() for t in r.times_ms.values()}
    meta = {k: first[k] for k in (*SAME, "configs")} | {
        "runs": min(runs), "pooled_from": [str(f) for f in folders],
        "machine": first["machine"] | {"speed_probe_ms": {
            f"{i + 1}.{k}": v for i, (_, m, _) in enumerate(loaded)
            for k, v in m["machine"].get("speed_probe_ms", {}).items()}}}
    return meta, list(results.values())


@click.command("paper-pool")
@click.argument("folders", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Folder for the pooled report (runs.csv, summary.json, report.md, plots).")
def paper_pool(folders: tuple[Path, ...], out: Path) -> None:
    """Pool several `mbds bench paper` results into one report.

    The runs of every results folder given are pooled, as if one run had made them."""
    meta, results = pool(list(folders))
    if not any(r.times_ms for r in results):
        raise click.ClickException("no runs in these folders")
    out.mkdir(parents=True, exist_ok=True)
    paper_report.write(out, meta, results, console)
    write_json(out / "meta.json", meta)
    console.print(f"{sum(len(t) for r in results for t in r.times_ms.values())} runs "
                  f"from {len(folders)} folders; results in {out}")
