"""A backend joining its cluster keeps the cluster's id once: a bus cut while the id was
being stored leaves it on disk, and the next bus, of the same cluster, is taken; a bus
of another cluster is refused, naming the id kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.store import Store


def test_the_cluster_id_is_kept_once_and_the_same_one_taken_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "backend.db")
    conn = store.writer()
    Store.join_cluster(conn, "c1")
    Store.join_cluster(conn, "c1")          # a bus cut after the id was stored, then again
    assert store.cluster() == "c1"
    with pytest.raises(ValueError, match="it already belongs to cluster c1"):
        Store.join_cluster(conn, "c2")
    assert store.cluster() == "c1"
