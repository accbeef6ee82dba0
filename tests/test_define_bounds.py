"""What a definition's YAML may hold beyond its text: nodes and nesting are bounded, each
refused naming its bound, and a large definition is parsed without holding up the
controller's other clients (docs/abdl.md, "Database definitions")."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mbds import definition_text
from mbds.client import Client, ClientError
from mbds.definition_text import MAX_DEPTH, MAX_NODES
from mbds.errors import DefinitionError
from mbds.schema import MAX_DEFINITION, parse_definition
from tests.conftest import CENSUS_YAML, Running, module_cluster

# The refused definition that held the controller for half a minute: 500,000 scalars.
ZEROS = "files: [" + ",".join(["0"] * 500_000) + "]"
ONE_FILE = "files: {F: {attributes: {A: integer}}}\n"   # 9 nodes


def padded(nodes: int) -> str:
    """A valid definition of exactly `nodes` YAML nodes: an unread key's list pads it."""
    return ONE_FILE + "pad: [" + ",".join(["0"] * (nodes - 11)) + "]\n"


def refused(text: str) -> str:
    with pytest.raises(DefinitionError) as e:
        parse_definition(text)
    return str(e.value)


@pytest.fixture(params=["libyaml", "python"])
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Either parser: libyaml's, and PyYAML's Python one that words syntax errors (and
    parses alone where libyaml is missing)."""
    if request.param == "python":
        monkeypatch.setattr(definition_text, "_CLoader", None)
    elif definition_text._CLoader is None:
        pytest.skip("PyYAML without libyaml")
    return str(request.param)


def test_the_nodes_of_a_definition_are_bounded() -> None:
    assert len(ZEROS) < MAX_DEFINITION
    message = refused(ZEROS)
    assert message == (f"the definition has more than {MAX_NODES} YAML nodes (scalars, "
                       f"lists and mappings), at most {MAX_NODES} allowed")
    assert [f.name for f in parse_definition(padded(MAX_NODES))] == ["F"]
    assert refused(padded(MAX_NODES + 1)) == message


def test_either_parser_counts_nodes_alike(loader: str, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    monkeypatch.setattr(definition_text, "MAX_NODES", 100)
    assert [f.name for f in parse_definition(padded(100))] == ["F"]
    assert "more than 100 YAML nodes" in refused(padded(101))
    # Counted before anything is built, and before a syntax error further on.
    assert "more than 100 YAML nodes" in refused(padded(101) + "]")


def test_either_parser_bounds_nesting_alike(loader: str) -> None:
    # The document's own mapping is one level.
    deep = MAX_DEPTH - 1
    assert refused("files: " + "[" * deep + "]" * deep) == (
        "definition must have a non-empty 'files' mapping")
    deeper = MAX_DEPTH
    assert refused("files: " + "[" * deeper + "]" * deeper) == (
        "definition nests its lists or mappings too deeply (a definition needs four levels)")


def test_either_parser_reads_a_definition_alike(loader: str) -> None:
    assert [f.name for f in parse_definition(CENSUS_YAML)] == ["CENSUS", "STATES"]
    assert refused("files: &f {F: {attributes: {A: integer}}}") == (
        "line 1, column 8: YAML anchor f is not allowed in a definition (no anchors or "
        "aliases)")
    assert refused("files: {F: {attributes: {A: integer, A: string}}}") == (
        "line 1, column 38: key 'A' appears twice in a mapping")
    [f] = parse_definition("files: {F: {attributes: {A: integer}, directory: "
                           "{A: {type: B, values: [010, 0x1F, 0o7]}}}}")
    assert [d.value for d in f.descriptor_specs["A"]] == [10, 31, 7]
    # A syntax error is worded by PyYAML's Python parser, the line it is on shown.
    assert refused("files:\n  X:\n    attributes: {A: integer\n").startswith(
        "definition is not valid YAML: while parsing a flow mapping\n  line 3, column 17:")


# ------------------------------------------------------------ a cluster --

def _monterey(r: Running) -> None:
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>)")


cluster = module_cluster("define-bounds", setup=_monterey)


def test_a_definition_of_too_many_nodes_is_refused_naming_the_bound(cluster: Running
                                                                    ) -> None:
    with pytest.raises(ClientError) as e:
        cluster.client.define(ZEROS)
    assert e.value.code == "INVALID_ARGUMENT", e.value
    assert str(e.value) == (f"the definition has more than {MAX_NODES} YAML nodes (scalars, "
                            f"lists and mappings), at most {MAX_NODES} allowed")
    assert sorted(cluster.client.status().files) == ["CENSUS", "STATES"]


def test_other_clients_are_answered_while_a_definition_is_parsed(cluster: Running) -> None:
    """A definition of as many nodes as allowed takes the controller seconds of CPU to
    read (and is then refused: its files are not a mapping). Another client's RETRIEVE
    and a health check, sent once it is on its way, are answered before it."""
    slow = "files: [" + ",".join(["0"] * (MAX_NODES - 3)) + "]"
    done: list[str] = []
    errors: list[BaseException] = []

    def define() -> None:
        try:
            with Client(cluster.cluster.address, timeout=300) as c, \
                    pytest.raises(ClientError, match="non-empty 'files' mapping"):
                c.define(slow)
        except BaseException as e:      # shown by the main thread
            errors.append(e)
        done.append("define")

    thread = threading.Thread(target=define, daemon=True)
    thread.start()
    time.sleep(0.5)                     # the definition is sent and being read
    with Client(cluster.cluster.address, timeout=300) as other, \
            grpc.insecure_channel(cluster.cluster.address) as ch:
        [res] = other.execute("RETRIEVE (FILE = Census) (CITY)")
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                      timeout=300)
        done.append("answered")
    thread.join(300)
    assert not errors, errors
    assert res.records == [{"CITY": "Monterey"}]
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert done == ["answered", "define"]
