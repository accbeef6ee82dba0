"""The paper's test database and request set (docs/spec.md §5), at any scale.

Scale k multiplies every value and range bound by k (records i = 1 … 1000k),
so the cluster structure — 24 clusters, 23 of 40k records and one of 80k —
and the paper's Table 2 stay the same. `multi` M stores every (INTE1, INTE2)
pair M times with MULTI = One, Two, … (the paper's C configuration doubles).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mbds.client import Client

FILE = "PAPER"
STR_ATTRS = [f"STR{i:02d}" for i in range(30)]
ATTRIBUTES = ["INTE1", "INTE2", "MULTI", *STR_ATTRS]
TARGETS = ["INTE1", "INTE2", *STR_ATTRS[:14]]        # half of the record's attributes
MULTI_NAMES = ["One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten"]


def definition_yaml(scale: int = 1) -> str:
    k = scale
    inte1 = [[200 * j * k + 1, 200 * (j + 1) * k] for j in range(5)]
    inte2 = [[40 * j * k + 1, 40 * (j + 1) * k] for j in range(23)] + [[920 * k + 1, 1000 * k]]
    attrs = ", ".join(["INTE1: integer", "INTE2: integer", "MULTI: string"]
                      + [f"{a}: string" for a in STR_ATTRS])
    return (f"files:\n  {FILE}:\n    attributes: {{{attrs}}}\n    directory:\n"
            f"      INTE1: {{type: A, ranges: {inte1}}}\n"
            f"      INTE2: {{type: A, ranges: {inte2}}}\n")


def multi_name(m: int) -> str:
    return MULTI_NAMES[m] if m < len(MULTI_NAMES) else f"N{m + 1}"


def filler(record_bytes: int) -> str:
    """The STRnn value: 'Xxxxx' for the paper's 200-byte records (33 fields of 6 bytes)."""
    length = max(5, record_bytes // 33 - 1)
    return "X" + "x" * (length - 1)


def records(scale: int = 1, multi: int = 1, record_bytes: int = 200
            ) -> Iterator[tuple[list[int | str], None]]:
    pad = filler(record_bytes)
    for m in range(multi):
        name = multi_name(m)
        for i in range(1, 1000 * scale + 1):
            yield [i, i, name, *([pad] * 30)], None


def held(client: Client) -> int:
    """How many records the file holds (it is defined)."""
    r = client.execute(f"RETRIEVE (FILE = {FILE}) (COUNT(INTE1))")[0]
    return int(r.records[0]["COUNT(INTE1)"] or 0) if r.records else 0


def load(client: Client, scale: int = 1, multi: int = 1, record_bytes: int = 200,
         advance: Callable[[int], object] | None = None) -> None:
    """Define the file and load its records through `client` (the benchmarks' set-up);
    `advance` hears each chunk's record count (a progress bar)."""
    client.define(definition_yaml(scale))
    for done in client.load(FILE, ATTRIBUTES, records(scale, multi, record_bytes)):
        if advance is not None:
            advance(done.stats.records_retrieved)


@dataclass(frozen=True)
class PaperRequest:
    number: int
    conjunctions: list[str]       # each a predicate, all ANDed with FILE = PAPER
    clusters: int                 # the paper's Table 2: clusters examined
    fraction: float               # share of the database retrieved
    extra: int                    # plus this many (INTE1, INTE2) pairs

    def abdl(self, scale: int = 1) -> str:
        k = scale
        preds = [p.format(k=k, **{f"v{n}": n * k for n in (10, 130, 200, 250, 400, 500,
                                                           800, 1000)},
                          v201=200 * k + 1, v401=400 * k + 1, v601=600 * k + 1,
                          v801=800 * k + 1) for p in self.conjunctions]
        query = " or ".join(f"((FILE = {FILE}) and {p})" for p in preds)
        return f"RETRIEVE {query} ({', '.join(TARGETS)})"

    def expected_records(self, scale: int = 1, multi: int = 1) -> int:
        return round(self.fraction * 1000 * scale * multi) + self.extra * multi


REQUESTS = [
    PaperRequest(1, ["(INTE2 = {v10})", "(INTE2 = {v130})"], 2, 0.0, 2),
    PaperRequest(2, ["(INTE2 <= {v250})"], 7, 0.25, 0),
    PaperRequest(3, ["(INTE2 <= {v500})"], 13, 0.50, 0),
    PaperRequest(4, ["(INTE1 <= {v1000})"], 24, 1.0, 0),
    PaperRequest(5, ["(INTE1 <= {v200})", "(INTE1 >= {v801})"], 9, 0.40, 0),
    PaperRequest(6, ["(INTE1 <= {v400})", "(INTE1 >= {v601})"], 19, 0.80, 0),
    PaperRequest(7, ["(INTE1 <= {v201})"], 10, 0.20, 1),
    PaperRequest(8, ["(INTE1 <= {v401})"], 15, 0.40, 1),
    PaperRequest(9, ["(INTE1 <= {v201})", "(INTE1 >= {v800})"], 19, 0.40, 2),
]
