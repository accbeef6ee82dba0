"""In-process building blocks for unit tests: the controller's directory and REQP, and a
backend's DM, on the census database of tests/conftest.py, without any process."""

from __future__ import annotations

from backend import dm
from backend.links import PeerLinks
from backend.plan import RequestPlan
from controller.iig import Iig
from controller.reqp import Prepared, Reqp
from mbds.directory import Directory
from mbds.proto import mbds_pb2 as pb
from mbds.schema import parse_definition
from mbds.values import Value
from tests.conftest import CENSUS_YAML

# (CITY, POP, STATE) of census records, one cluster each unless values repeat.
CENSUS_ROWS = [("Monterey", 25, "CA"), ("Carmel", 2000, "CA"), ("Albany", 3000, "NY")]


def census_iig(rows: list[tuple[str, int, str]] = CENSUS_ROWS) -> Iig:
    """IIG with the census files defined and a cluster for each of `rows`."""
    iig = Iig(Directory())
    iig.define(parse_definition(CENSUS_YAML))
    for row in rows:
        iig.cluster_of("CENSUS", census_key(iig, *row), pb.DirectoryUpdate())
    return iig


def census_key(iig: Iig, city: str, pop: int, state: str) -> list[Value]:
    """The directory values of a census record, in the file's directory-attribute order."""
    record = {"FILE": "CENSUS", "CITY": city, "POP": pop, "STATE": state}
    return [record[a] for a in iig.directory.files["CENSUS"].directory_attributes]


def prepare(directory: Directory, text: str) -> list[Prepared]:
    return Reqp(directory).prepare(text)[0]


def unit(directory: Directory, text: str) -> pb.TrafficUnit:
    """The traffic unit REQP forms for `text`."""
    return pb.TrafficUnit(requests=[p.request for p in prepare(directory, text)])


def plan(directory: Directory, text: str) -> list[RequestPlan]:
    """REQP, then DM's descriptor search (whole, on one backend), cluster search and
    address generation, as a backend runs them for the traffic unit of `text`."""
    tu = unit(directory, text)
    return dm.plan_requests(directory, tu, dm.descriptor_search(directory, tu, 0, 1))


# (CITY, POP, STATE): POP's ranges are [0, 999] and [1000, 4999], so 9000 has none.
ROWS = [("Monterey", 25, "CA"), ("Carmel", 2000, "CA"), ("Albany", 9000, "NY")]


def census_placed() -> tuple[Iig, dict[str, int]]:
    """IIG with the census files, one cluster per row of ROWS (by city) and per state
    code; the clusters' ids by city or code."""
    iig = census_iig([])
    cids = {city: iig.cluster_of("CENSUS", census_key(iig, city, pop, state),
                                 pb.DirectoryUpdate()) for city, pop, state in ROWS}
    for code in ("CA", "NY"):
        cids[code] = iig.cluster_of("STATES", ["STATES", code], pb.DirectoryUpdate())
    return iig, cids


def census() -> tuple[Directory, dict[str, int]]:
    """The directory of `census_placed`: what every backend holds."""
    iig, cids = census_placed()
    return iig.directory, cids


def lock_set(directory: Directory, text: str) -> dict[tuple, str]:
    return dm.lock_set(plan(directory, text))


class KeptPeers(PeerLinks):
    """Peer streams that go nowhere: what a backend broadcasts is only kept."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[pb.DescriptorIds] = []

    def configure(self, peers: list[str], my_index: int, cluster: str = "") -> None:
        self.targets = [a for i, a in enumerate(peers) if i != my_index]

    def broadcast(self, msg: pb.DescriptorIds) -> None:
        self.sent.append(msg)
