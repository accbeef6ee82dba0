"""Input that is not UTF-8, fed to the commands that read text from the user (`exec`
from its argument or stdin, `define` from a file or stdin, `shell` line by line) and to
the client: each names the first bad byte and where it is, exits 1 with no traceback,
and the shell goes on to its next line."""

from __future__ import annotations

import itertools
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pexpect
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.server import MAX_FIELDS_SEARCHED, _not_utf8
from mbds.client import Client, ClientError
from mbds.proto import mbds_pb2 as pb
from tests.conftest import CENSUS_YAML

BAD_REQUEST = b"RETRIEVE (FILE = Census) (CITY) -- \xff"


def mbds(*args: str | bytes, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mbds", *args], input=stdin,
                          capture_output=True, timeout=120)


def assert_named(r: subprocess.CompletedProcess, what: str, byte: int, position: int
                 ) -> None:
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 1, err
    assert "Traceback" not in err, err
    assert err.strip() == (f"error: {what} is not valid UTF-8 "
                           f"(byte 0x{byte:02x} at position {position})"), err


@pytest.fixture
def address(cluster_factory) -> str:
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>)")
    return r.cluster.address


def test_exec_names_the_bad_byte_of_its_argument_and_of_stdin(address: str) -> None:
    assert_named(mbds("exec", "--controller", address, BAD_REQUEST),
                 "the request", 0xFF, len(BAD_REQUEST) - 1)
    assert_named(mbds("exec", "--controller", address, "-", stdin=b"\xff\xfe RETRIEVE"),
                 "standard input", 0xFF, 0)
    # A valid UTF-8 request that is not ASCII still goes through.
    ok = mbds("exec", "--controller", address, "-",
              stdin="RETRIEVE ((FILE = Census) and (CITY = 'Ménerbes')) (CITY)".encode())
    assert ok.returncode == 0 and b"RETRIEVE: 0 records" in ok.stdout, ok.stderr


def test_define_names_the_bad_byte_of_its_file_and_of_stdin(address: str,
                                                            tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"files: {}\n# \xfe\n")
    assert_named(mbds("define", "--controller", address, str(bad)), str(bad), 0xFE, 12)
    assert_named(mbds("define", "--controller", address, "-", stdin=bad.read_bytes()),
                 "standard input", 0xFE, 12)


@pytest.mark.parametrize("line", [BAD_REQUEST, b"\\d Cens\xe9"])
def test_the_shell_names_the_bad_byte_and_goes_on(address: str, tmp_path: Path,
                                                   line: bytes) -> None:
    # As tests/test_shell.py spawns it, with the bytes sent as they are.
    child = pexpect.spawn(sys.executable, ["-m", "mbds", "shell", "--controller", address],
                          env={"HOME": str(tmp_path), "TERM": "xterm"}, encoding="utf-8",
                          codec_errors="surrogateescape", timeout=60, dimensions=(60, 160))
    try:
        child.expect("mbds>")
        child.send(line.decode("utf-8", "surrogateescape") + "\r")
        child.expect(r"error: the line is not valid UTF-8 \(byte 0x(ff|e9) at position "
                     rf"{len(line) - 1}\)")
        child.send("RETRIEVE (FILE = Census) (CITY)\r")       # the next line runs
        child.expect("Monterey")
        child.expect("examined")
        child.send("\\q\r")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert "Traceback" not in (child.before or "")
    assert (tmp_path / ".mbds" / "history").read_bytes().count(b"\n+") == 3


def test_the_shell_reading_a_pipe_names_the_bad_line_and_goes_on(address: str,
                                                                  tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "mbds", "shell", "--controller", address],
                       input=BAD_REQUEST + b"\nRETRIEVE (FILE = Census) (CITY)\n\\q\n",
                       capture_output=True, timeout=120, env={"HOME": str(tmp_path)})
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    assert r.returncode == 0 and "Traceback" not in out, out
    assert (f"error: line 1 of the input is not valid UTF-8 (byte 0xff at position "
            f"{len(BAD_REQUEST) - 1})") in out
    assert "Monterey" in out


def test_the_client_refuses_text_the_wire_cannot_carry(address: str) -> None:
    """A surrogate (how Python keeps a byte it could not decode) is INVALID_ARGUMENT,
    and the client's session goes on."""
    with Client(address) as c:
        with pytest.raises(ClientError) as e:
            c.execute(BAD_REQUEST.decode("utf-8", "surrogateescape"))
        assert e.value.code == "INVALID_ARGUMENT"
        assert str(e.value) == ("the request is not valid UTF-8 "
                                f"(byte 0xff at character {len(BAD_REQUEST) - 1})")
        assert c.execute("RETRIEVE (FILE = Census) (CITY)")[0].records == [
            {"CITY": "Monterey"}]


def test_a_stream_message_that_is_not_utf8_on_the_wire_is_invalid_argument(
        address: str) -> None:
    """A load chunk whose file name is bytes that are not UTF-8 (a client other than
    ours): INVALID_ARGUMENT naming the message, nothing stored, and the controller goes
    on serving."""
    data = pb.LoadRequest(file="CENSUS", attributes=["CITY"], records=[
        pb.Row(values=[pb.Value(s="Salinas")])]).SerializeToString().replace(b"CENSUS",
                                                                            b"C\xffNSUS")
    with grpc.insecure_channel(address) as ch:
        load = ch.stream_stream("/mbds.Controller/Load", request_serializer=None,
                                response_deserializer=None)
        with pytest.raises(grpc.RpcError) as e:
            list(load(iter([data]), timeout=30))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
    assert e.value.details() == ("a malformed message: mbds.LoadRequest.file is not valid "
                                 "UTF-8 (byte 0xff at position 1)")
    with Client(address) as c:
        assert c.execute("RETRIEVE (FILE = Census) (CITY)")[0].records == [
            {"CITY": "Monterey"}]


# Field 1 (ExecuteRequest.text, DefineRequest.yaml, StatusRequest.file) holding a lone
# surrogate as CESU-8 writes it: three bytes no UTF-8 decoder takes.
SURROGATE = b"\x0a\x03\xed\xa0\x80"


def request_errors(url: str) -> float:
    """The controller's count of calls it refused as malformed messages."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        for family in text_string_to_metric_families(reply.read().decode()):
            for sample in family.samples:
                if sample.name == "mbds_request_errors_total" and \
                        sample.labels == {"kind": "DecodeError"}:
                    return sample.value
    return 0.0


def test_a_request_whose_string_is_not_utf8_on_the_wire_is_invalid_argument(
        cluster_factory) -> None:
    """Each call of a client other than ours whose string field is not UTF-8 is refused
    (INVALID_ARGUMENT, naming the field and its first bad byte) and counted as a refused
    request, not ended as UNKNOWN naming protobuf's exception; the controller goes on."""
    r = cluster_factory(1, metrics_port=0)
    r.client.define(CENSUS_YAML)
    r.client.execute("INSERT (<FILE, Census>, <CITY, Monterey>, <POP, 25000>)")
    url = r.client.status().metrics_url
    before = request_errors(url)
    with grpc.insecure_channel(r.cluster.address) as ch:
        def call(kind: str, method: str) -> object:
            return getattr(ch, kind)(f"/mbds.Controller/{method}", request_serializer=None,
                                     response_deserializer=None)
        calls = {
            "Execute": lambda: list(call("unary_stream", "Execute")(SURROGATE, timeout=30)),
            "Define": lambda: call("unary_unary", "Define")(SURROGATE, timeout=30),
            "Status": lambda: call("unary_unary", "Status")(SURROGATE, timeout=30),
            "Session": lambda: list(call("stream_stream", "Session")(iter([SURROGATE]),
                                                                     timeout=30)),
        }
        field = {"Execute": "ExecuteRequest.text", "Define": "DefineRequest.yaml",
                 "Status": "StatusRequest.file", "Session": "ExecuteRequest.text"}
        for method, send in calls.items():
            with pytest.raises(grpc.RpcError) as e:
                send()
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, e.value)
            assert e.value.details() == (f"a malformed message: mbds.{field[method]} is not "
                                         "valid UTF-8 (byte 0xed at position 0)"), method
    assert request_errors(url) == before + len(calls)
    assert sorted(r.client.status().files) == ["CENSUS", "STATES"]
    assert r.client.execute("RETRIEVE (FILE = Census) (CITY)")[0].records == [
        {"CITY": "Monterey"}]


def test_a_session_ends_at_a_malformed_message_and_what_it_answered_before_stands(
        cluster_factory) -> None:
    """A Session stream's message that does not parse ends the stream (INVALID_ARGUMENT,
    naming the field), as a server closes a connection that breaks its protocol; the
    request answered before it on the same stream is kept, and nothing after it runs."""
    r = cluster_factory(1)
    r.client.define(CENSUS_YAML)
    insert = pb.ExecuteRequest(text="INSERT (<FILE, Census>, <CITY, Carmel>, <POP, 4000>)",
                               timeout_s=30).SerializeToString()
    after = pb.ExecuteRequest(text="INSERT (<FILE, Census>, <CITY, Salinas>, <POP, 9>)",
                              timeout_s=30).SerializeToString()
    got: list[pb.ExecuteReplies] = []
    with grpc.insecure_channel(r.cluster.address) as ch:
        session = ch.stream_stream("/mbds.Controller/Session", request_serializer=None,
                                   response_deserializer=pb.ExecuteReplies.FromString)
        with pytest.raises(grpc.RpcError) as e:
            for batch in session(iter([insert, SURROGATE, after]), timeout=30):
                got.append(batch)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
    assert "mbds.ExecuteRequest.text is not valid UTF-8" in (e.value.details() or "")
    assert got and got[-1].end and not got[-1].HasField("failure")
    assert [x.done.stats.records_retrieved for b in got for x in b.replies
            if x.HasField("done")] == [1]
    assert r.client.execute("RETRIEVE (FILE = Census) (CITY)")[0].records == [
        {"CITY": "Carmel"}]


def test_the_string_not_utf8_is_found_in_a_nested_message_within_a_bound() -> None:
    """Load's records nest their values two messages deep; past MAX_FIELDS_SEARCHED fields
    the search gives up, and protobuf's own words are the message."""
    def where(data: bytes) -> str | None:
        return _not_utf8(data, pb.LoadRequest.DESCRIPTOR, "mbds.LoadRequest",
                         itertools.count())

    row = pb.Row(values=[pb.Value(i=1), pb.Value(s="Salénas")])
    data = pb.LoadRequest(file="CENSUS", records=[row]).SerializeToString()
    assert where(data.replace("é".encode(), b"\xe9")) == (
        "mbds.LoadRequest.records.values.s is not valid UTF-8 (byte 0xe9 at position 3)")
    assert where(data) is None
    many = pb.LoadRequest(attributes=["A"] * MAX_FIELDS_SEARCHED + ["B\x00"])
    assert where(many.SerializeToString().replace(b"B\x00", b"B\xff")) is None
    few = pb.LoadRequest(attributes=["A"] * (MAX_FIELDS_SEARCHED - 2) + ["B\x00"])
    assert where(few.SerializeToString().replace(b"B\x00", b"B\xff")) == (
        "mbds.LoadRequest.attributes is not valid UTF-8 (byte 0xff at position 1)")
