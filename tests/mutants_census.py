"""The census database of tests/conftest.py in process (IIG's directory, REQP, DM), for the
tests/test_mutants_*.py tests (docs/mutation.md)."""

from __future__ import annotations

from backend import dm
from backend.plan import RequestPlan
from controller.iig import Iig
from controller.reqp import Reqp
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from tests.conftest import CENSUS_YAML

# (CITY, POP, STATE): POP's ranges are [0, 999] and [1000, 4999], so 9000 has none.
ROWS = [("Monterey", 25, "CA"), ("Carmel", 2000, "CA"), ("Albany", 9000, "NY")]


def census() -> tuple[Directory, dict[str, int]]:
    """The census files with one cluster per row of ROWS and per state code (CA, NY)."""
    iig = Iig(Directory())
    iig.define(parse_definition(CENSUS_YAML))
    d, cids = iig.directory, {}
    for city, pop, state in ROWS:
        rec = {"FILE": "CENSUS", "CITY": city, "POP": pop, "STATE": state}
        key = [rec[a] for a in d.files["CENSUS"].directory_attributes]
        cids[city] = iig.cluster_of("CENSUS", key, pb.DirectoryUpdate())
    for code in ("CA", "NY"):
        rec = {"FILE": "STATES", "CODE": code}
        key = [rec[a] for a in d.files["STATES"].directory_attributes]
        cids[code] = iig.cluster_of("STATES", key, pb.DirectoryUpdate())
    return d, cids


def unit(d: Directory, text: str) -> pb.TrafficUnit:
    return pb.TrafficUnit(requests=[p.request for p in Reqp(d).prepare(text)[0]])


def plan(d: Directory, text: str) -> list[RequestPlan]:
    tu = unit(d, text)
    return dm.plan_requests(d, tu, dm.descriptor_search(d, tu, 0, 1))
