"""A chunk of a load too large for one batch (`LOAD_BYTES`) travels as several; a record
in it that no message can carry refuses the whole chunk before any part of it is sent,
so the error's "its batch, records A-B, is not loaded" is what is stored: nothing of
those records, and every chunk before them."""

from __future__ import annotations

import pytest

from mbds.client import ClientError
from mbds.columns import LOAD_BYTES
from mbds.service import MESSAGE_BUDGET

YAML = """
files:
  WIDE:
    attributes: {K: integer, S: string}
    directory:
      K: {type: A, ranges: [[0, 1000000]]}
"""
MB = 1_000_000
CHUNK = 30


def test_a_record_no_message_carries_refuses_its_whole_chunk_none_of_it_stored(
        cluster_factory) -> None:
    r = cluster_factory(2)
    r.client.define(YAML)
    # Records 1-30 are small; 31-60 are a megabyte each (more than LOAD_BYTES together,
    # so their chunk is split), none the same, and record 40, in their middle, is more
    # than a message carries; 61-90 are small again.
    rows = [([k, f"{k:03}" + ("s" * MB if 31 <= k <= 60 else "")], None)
            for k in range(1, 91)]
    rows[39] = ([40, "b" * MESSAGE_BUDGET], None)
    assert sum(len(v[1]) for v, _ in rows[30:60]) > LOAD_BYTES
    acknowledged = []
    with pytest.raises(ClientError) as err:
        for done in r.client.load("WIDE", ["K", "S"], rows, chunk=CHUNK):
            acknowledged.append((done.first_record, done.stats.records_retrieved))
    message = str(err.value)
    assert err.value.code == "INVALID_ARGUMENT", message
    assert message.startswith("record 40: the record is ") and "MAX_MESSAGE" in message
    assert message.endswith("(its batch, records 31-60, is not loaded)"), message
    assert acknowledged == [(1, CHUNK)]
    [res] = r.client.execute("RETRIEVE (FILE = WIDE) (K)")
    assert sorted(x["K"] for x in res.records) == list(range(1, 31))
