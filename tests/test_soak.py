"""Soak: no process keeps memory from the traffic units it has served.

A real cluster (a controller and two backends) is warmed up, then driven with
20,000 mixed traffic units from four client threads, each with its own session
(small RETRIEVEs, INSERTs, UPDATEs in place and moving a record to another
cluster, aggregates, DELETEs, four-request transactions) and a bulk load of
10,000 records through `Client.load` (`mbds load`'s path). Every process's
resident memory must stay within BOUND_MB of where it was after the warm-up.

Why 8 MB: the backends used to keep 8 to 10 kB of every unit (its state and
its message, held by a timer for two minutes, and the freed memory never went
back to the system), 190 MB in this run, and a leak of 0.4 kB a unit or more
fails here; a sound process moves by up to about 3 MB (SQLite's page caches,
up to 2 MB per connection, filling; the C heap's top after a bulk load). The
bench behind it: `mbds bench memory` (docs/memory.md).
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from loadgen.memory import Traffic, memory, sample

BOUND_MB = 8.0
THREADS = 4
WARMUP = 3000
STEPS = 4
STEP = 5000            # traffic units between readings: 20,000 in all
LOAD_SCALE = 10        # bulk loads of 10,000 paper records


def test_memory_stays_flat_under_sustained_traffic(cluster_factory) -> None:
    cluster = cluster_factory(2, internal_timing=False).cluster
    traffic = Traffic(cluster.address, THREADS, seed=16)
    try:
        traffic.setup(LOAD_SCALE)
        # Warm-up: every cluster and descriptor the traffic uses exists, the backends'
        # reader connections are open and the writer's page cache has seen two loads.
        traffic.run(WARMUP)
        for _ in range(2):
            assert traffic.load(LOAD_SCALE) == 1000 * LOAD_SCALE
        traffic.run(1000)
        base = sample(cluster)
        readings = []
        for step in range(STEPS):
            if step == STEPS // 2:     # mid-run, so traffic follows it before a reading
                assert traffic.load(LOAD_SCALE) == 1000 * LOAD_SCALE
            assert traffic.run(STEP) == STEP
            readings.append(sample(cluster))
    finally:
        traffic.close()
    table = "\n".join(f"{name}: after warm-up {base[name]:.1f} MB, then "
                      + ", ".join(f"{r[name]:.1f}" for r in readings) for name in base)
    print(table)
    assert set(base) == {"controller", "b0", "b1"}
    for name in base:
        growth = max(r[name] for r in readings) - base[name]
        assert growth <= BOUND_MB, f"{name} grew {growth:.1f} MB:\n{table}"


def test_bench_memory_prints_rss_per_process_and_step(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    result = CliRunner().invoke(memory, [
        "--units", "60", "--every", "30", "--warmup", "20", "--threads", "2",
        "--load-scale", "1", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = result.output
    assert "Resident memory (MB) per process" in text
    for header in ("process", "0", "30", "60", "growth/10,000"):
        assert header in text
    lines = {line.split()[1]: line for line in text.splitlines()
             if line.startswith("│") and line.split()[1] in ("controller", "b0", "b1")}
    assert set(lines) == {"controller", "b0", "b1"}
    for line in lines.values():
        cells = [c.strip() for c in line.strip("│").split("│")]
        assert len(cells) == 5                      # process, 0, 30, 60, growth
        readings = [float(c) for c in cells[1:4]]
        assert all(20 < mb < 2000 for mb in readings)   # MB of a live Python process
        assert cells[4].startswith(("+", "-"))
    rows = (out / "results.csv").read_text().splitlines()
    assert rows[0].split(",") == ["units", "loaded", "controller", "b0", "b1"]
    assert [r.split(",")[:2] for r in rows[1:]] == [["0", "0"], ["30", "1000"], ["60", "2000"]]
    assert "mbds bench memory" in (out / "summary.md").read_text()
