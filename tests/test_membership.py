"""A backend joining a running system (scale 3 → 4): admitted between traffic units, it
gets the directory, takes new records, and nothing already stored moves or is lost."""

from __future__ import annotations

import asyncio
from pathlib import Path

from controller.coordinator import Coordinator, natural_key
from mbds.client import collect
from mbds.cluster import Proc
from tests.conftest import CENSUS_YAML


def test_natural_order_of_backend_names() -> None:
    assert sorted(["b10", "b2", "b1"], key=natural_key) == ["b1", "b2", "b10"]


async def _execute(c: Coordinator, text: str) -> list:
    return collect([r async for batch in c.execute(text) for r in batch.replies])


def test_scale_up_admits_a_backend(tmp_path: Path) -> None:
    procs = [Proc(f"b{i}", ["backend", "--listen", "127.0.0.1:0", "--data-dir",
                            str(tmp_path / f"b{i}")]) for i in range(3)]

    async def scenario() -> None:
        addrs = [p.wait_ready(30) for p in procs]
        c = Coordinator(addrs, connect_timeout=10)
        await c.start()
        await c.define(CENSUS_YAML)
        for i in range(30):
            await _execute(c, f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, {i}>)")
        procs.append(Proc("b3", ["backend", "--listen", "127.0.0.1:0", "--data-dir",
                                 str(tmp_path / "b3")]))
        # Traffic keeps flowing while the new backend is admitted.
        background = asyncio.gather(*(_execute(c, "RETRIEVE (FILE = Census) (COUNT(CITY))")
                                      for _ in range(5)))
        await c.add_backends([procs[-1].wait_ready(30)])
        await background
        assert [x.name for x in c.links] == ["b0", "b1", "b2", "b3"]
        for i in range(30, 70):
            await _execute(c, f"INSERT (<FILE, Census>, <CITY, 'c{i}'>, <POP, {i}>)")
        [res] = await _execute(c, "RETRIEVE (FILE = Census) (CITY)")
        assert sorted(r["CITY"] for r in res.records) == sorted(f"c{i}" for i in range(70))
        per = {b["backend"]: b["records"] for b in res.stats["backends"]}
        assert per["b3"] > 0                      # new inserts reach the new backend
        digests = {(await x.hello(5)).directory_digest for x in c.links}
        assert digests == {c.directory.digest()}
        await c.close()

    try:
        asyncio.run(scenario())
    finally:
        for p in procs:
            p.stop()
