"""Bounds on what clients send: each is refused with its limit named (INVALID_ARGUMENT)
before anything reaches a backend, repeats client input only shortened, and changes no
data; the prepared-request cache keeps to its size in text as well as in entries."""

from __future__ import annotations

import asyncio
import math
import re

import grpc
import pytest

from controller.abdl import AbdlSyntaxError, TextTooLong, parse
from controller.coordinator import Coordinator
from controller.reqp import (
    CACHE_TEXT,
    MAX_PREDICATES,
    MAX_REQUESTS,
    MAX_TEXT,
    MAX_TIMEOUT_S,
    Reqp,
)
from controller.session import failure
from mbds.client import ClientError
from mbds.errors import FAILURE_MESSAGE, DefinitionError, SemanticError
from mbds.proto import mbds_pb2 as pb
from mbds.schema import MAX_ATTRIBUTES, MAX_DEFINITION, MAX_FILES, MAX_NAME, parse_definition
from mbds.values import INT64_MAX, INT64_MIN, to_pb
from tests.conftest import CENSUS_YAML, Running
from tests.inproc import census_iig

BIG = 2 ** 70
RANGE = f"from {INT64_MIN} to {INT64_MAX}"
INSERT = "INSERT (<FILE, Census>, <CITY, '{c}'>, <POP, {p}>, <STATE, CA>, <AREA, 1.5>)"
LONG = "Q" * 300_000          # a name or value far longer than any error should repeat


def reqp() -> Reqp:
    return Reqp(census_iig([]).directory)


def refused(text: str, r: Reqp | None = None) -> str:
    with pytest.raises((SemanticError, AbdlSyntaxError)) as e:
        (r or reqp()).prepare(text)
    return str(e.value)


def padded(text: str, length: int) -> str:
    return text + " " * (length - len(text))


def disjunction(n: int, attr: str = "AREA", value: str = "{i}") -> str:
    return " or ".join(f"({attr} = {value.format(i=i)})" for i in range(n))


def shortened(message: str, length: int) -> bool:
    """Whether `message` repeats an input of `length` characters (a few more with quotes
    and brackets) cut short, with its full length."""
    m = re.search(r"… \((\d+) characters\)", message)
    return len(message) < 400 and m is not None and length <= int(m.group(1)) <= length + 4


# -------------------------------------------------------------- integers --

@pytest.mark.parametrize("literal", [str(INT64_MAX + 1), str(INT64_MIN - 1), str(BIG), "9" * 5000])
def test_an_integer_literal_beyond_64_bits_is_refused_naming_it_and_the_range(
        literal: str) -> None:
    for text in (f"INSERT (<FILE, Census>, <POP, {literal}>)",
                 f"RETRIEVE ((FILE = Census) and (POP = {literal})) (CITY)",
                 f"UPDATE (FILE = Census) <POP = POP + {literal}>"):
        message = refused(text)
        assert RANGE in message and literal[:20] in message and len(message) < 300
    for v in (INT64_MIN, INT64_MAX):      # the bounds themselves are integers
        [p] = reqp().prepare(f"RETRIEVE ((FILE = Census) and (POP = {v})) (CITY)")[0]
        assert p.request.retrieval.query.conjunctions[0].predicates[1].value.i == v


def test_arithmetic_with_a_number_beyond_64_bits_is_refused() -> None:
    message = refused(f"UPDATE (FILE = Census) <POP = POP - {INT64_MAX + 1}>")
    assert RANGE in message and str(INT64_MAX + 1) in message
    # `POP -9223372036854775808` is POP plus the smallest integer, as written.
    [update] = reqp().prepare(f"UPDATE (FILE = Census) <POP = POP {INT64_MIN}>")[0]
    modifier = update.request.modifier
    assert (modifier.arith, modifier.value.i) == ("+", INT64_MIN)


def test_the_conversion_clients_send_values_with_refuses_integers_beyond_64_bits() -> None:
    for v in (BIG, -BIG, 10 ** 5000):
        with pytest.raises(SemanticError) as e:
            to_pb(v)
        assert RANGE in str(e.value) and len(str(e.value)) < 300
    assert (to_pb(INT64_MIN).i, to_pb(INT64_MAX).i) == (INT64_MIN, INT64_MAX)


# -------------------------------------------------------- request sizes --

def test_request_text_outside_record_bodies_is_bounded() -> None:
    r = reqp()
    text = "RETRIEVE (FILE = Census) (CITY)"
    r.prepare(padded(text, MAX_TEXT))
    body = "b" * (2 * MAX_TEXT)          # bodies are data: gRPC's message size bounds them
    insert = f"INSERT (<FILE, Census>, <CITY, x>) {{{body}}}"
    assert r.prepare(insert)[0][0].inserts[0].body == body
    # Braces inside strings start no body.
    braces = "RETRIEVE " + " or ".join(["(CITY = '{')", *["(POP = 1)"] * (MAX_TEXT // 10),
                                        "(CITY = '}')"]) + " (CITY)"
    for long in (padded(text, MAX_TEXT + 1), braces, padded(insert, len(insert) + MAX_TEXT)):
        message = refused(long, r)
        assert f"{len(long)} characters" in message and f"at most {MAX_TEXT}" in message
    # The parse stops where the limit is passed, not at the end of the text.
    with pytest.raises(TextTooLong) as e:
        parse("DELETE " + " or ".join(["(POP = 1)"] * MAX_TEXT), MAX_TEXT)   # 12 MiB
    assert e.value.args[0] <= MAX_TEXT + 20


def test_predicates_per_request_are_bounded() -> None:
    r = reqp()
    r.prepare(f"RETRIEVE {disjunction(MAX_PREDICATES)} (CITY)")
    half = MAX_PREDICATES // 2
    for text in (f"RETRIEVE {disjunction(MAX_PREDICATES + 1)} (CITY)",
                 "DELETE ((FILE = Census) and "
                 + " and ".join(f"(AREA != {i})" for i in range(MAX_PREDICATES)) + ")",
                 # the two sides of a join count together
                 f"RETRIEVE {disjunction(half)} (CITY) COMMON (STATE, CODE) RETRIEVE "
                 f"{disjunction(MAX_PREDICATES - half + 1, 'NAME', 'n{i}')} (NAME)"):
        message = refused(text, r)
        assert f"{MAX_PREDICATES + 1} predicates" in message
        assert f"at most {MAX_PREDICATES}" in message


def test_requests_per_transaction_are_bounded() -> None:
    r = reqp()
    one = "RETRIEVE (FILE = Census) (CITY)"
    r.prepare("[" + "; ".join([one] * MAX_REQUESTS) + "]")
    message = refused("[" + "; ".join([one] * (MAX_REQUESTS + 1)) + "]", r)
    assert f"{MAX_REQUESTS + 1} requests" in message and f"at most {MAX_REQUESTS}" in message


# ------------------------------------------------------------- echoes --

@pytest.mark.parametrize("text", [
    f"RETRIEVE (FILE = {LONG}) (CITY)",
    f"RETRIEVE ((FILE = Census) and ({LONG} = 1)) (CITY)",
    f"RETRIEVE ({LONG} = 1) (CITY)",
    f"RETRIEVE (FILE = Census) ({LONG})",
    f"RETRIEVE (FILE = Census) (COUNT(CITY)) BY {LONG}",
    f"INSERT (<{LONG}, 1>)",
    f"INSERT (<FILE, Census>, <{LONG}, 1>)",
    f"INSERT (<FILE, Census>, <POP, {LONG}>)",
    f"UPDATE (FILE = Census) <{LONG} = 1>",
    f"UPDATE (FILE = Census) <POP = {LONG} + 1>",
], ids=lambda t: re.sub("Q{9,}", "Q…", t))
def test_an_error_repeating_client_input_shortens_it(text: str) -> None:
    assert shortened(refused(text), len(LONG))


def test_a_load_naming_an_unknown_file_or_attribute_shortens_it() -> None:
    long = "X" * 10_000_000
    for chunk in (pb.LoadRequest(file=long, attributes=["POP"]),
                  pb.LoadRequest(file="CENSUS", attributes=[long])):
        with pytest.raises(SemanticError) as e:
            reqp().prepare_load(chunk)
        assert shortened(str(e.value), len(long))


def test_a_failure_message_is_bounded_whatever_it_repeats() -> None:
    for e in (SemanticError("x" * 100_000), RuntimeError("y" * 100_000)):
        code, message = failure(e)
        assert len(message) < FAILURE_MESSAGE + 30 and "characters)" in message


# -------------------------------------------------------------- timeout --

def test_timeout_s_is_capped_and_bad_ones_refused_before_anything_runs(monkeypatch) -> None:
    asked: list[float | None] = []

    async def main() -> None:
        c = Coordinator([])
        c.iig.define(parse_definition(CENSUS_YAML))
        c.started = True            # as if it had met its (no) backends

        async def run(prepared, transaction, update=None, timeout=None, arrived=None):
            asked.append(timeout)
            yield pb.ExecuteReplies()

        monkeypatch.setattr(c, "run", run)

        async def ask(timeout: float | None) -> None:
            async for _ in c.execute("RETRIEVE (FILE = Census) (CITY)", timeout):
                pass

        for timeout in (1e9, None, 5.0):
            await ask(timeout)
        for bad in (math.nan, -1.0, math.inf, -math.inf):
            with pytest.raises(SemanticError, match="timeout_s"):
                await ask(bad)
        await c.close()

    asyncio.run(main())
    assert asked == [MAX_TIMEOUT_S, None, 5.0]


# ---------------------------------------------------------- definitions --

def one_file(attributes: str, directory: str = "") -> str:
    return f"files:\n  F:\n    attributes: {{{attributes}}}\n" + (
        f"    directory: {{{directory}}}\n" if directory else "")


def defined(text: str) -> str:
    with pytest.raises(DefinitionError) as e:
        parse_definition(text)
    return str(e.value)


BOMB = """
a: &a [x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
files:
  F:
    attributes: {A: integer}
    directory:
      A: {type: A, ranges: [*c, *c]}
"""


def test_yaml_anchors_and_aliases_are_refused() -> None:
    assert "alias" in defined(BOMB)
    assert "anchor" in defined("files: &f {F: {attributes: {A: integer}}}")


def test_definition_text_is_bounded() -> None:
    parse_definition(padded(CENSUS_YAML, MAX_DEFINITION))
    message = defined(padded(CENSUS_YAML, MAX_DEFINITION + 1))
    assert f"{MAX_DEFINITION + 1} characters" in message and f"at most {MAX_DEFINITION}" in message


@pytest.mark.parametrize("descriptor", [
    "A: {type: A, ranges: [[.nan, 1.0]]}", "A: {type: A, ranges: [[0.0, .inf]]}",
    "A: {type: A, ranges: [[-.inf, 0.0], [1.0, 2.0]]}", "A: {type: B, values: [1.0, .nan]}"])
def test_descriptor_bounds_must_be_finite(descriptor: str) -> None:
    assert "not a finite number" in defined(one_file("A: float", descriptor))


def test_attributes_per_file_and_files_per_definition_are_bounded() -> None:
    attrs = [f"A{i}: integer" for i in range(MAX_ATTRIBUTES + 1)]
    assert len(parse_definition(one_file(", ".join(attrs[:-1])))[0].attributes) == MAX_ATTRIBUTES
    message = defined(one_file(", ".join(attrs)))
    assert f"{MAX_ATTRIBUTES + 1} attributes" in message and f"at most {MAX_ATTRIBUTES}" in message
    files = [f"  F{i}: {{attributes: {{A: integer}}}}" for i in range(MAX_FILES + 1)]
    assert len(parse_definition("files:\n" + "\n".join(files[:-1]))) == MAX_FILES
    message = defined("files:\n" + "\n".join(files))
    assert f"{MAX_FILES + 1} files" in message and f"at most {MAX_FILES}" in message


@pytest.mark.parametrize("text", [
    f"files:\n  ? {LONG}\n  : {{attributes: {{A: integer}}}}",            # too long a name
    f"files:\n  ? '{LONG}-'\n  : {{attributes: {{A: integer}}}}",          # not an identifier
    one_file(f"A: '{LONG}'"),                                               # not a type
    one_file("A: string", f"A: {{type: A, ranges: [['{LONG}']]}}"),         # not [low, high]
    one_file("A: integer", f"A: {{type: B, values: ['{LONG}']}}"),          # not an integer
], ids=["name", "identifier", "type", "range", "value"])
def test_a_definition_error_repeating_client_input_shortens_it(text: str) -> None:
    assert shortened(defined(text), len(LONG))


def test_names_are_bounded() -> None:
    name = "N" * MAX_NAME
    assert parse_definition(one_file(f"{name}: integer"))[0].attributes[0].name == name
    message = defined(one_file(f"{name}X: integer"))
    assert f"{MAX_NAME + 1} characters" in message and f"at most {MAX_NAME}" in message


# ---------------------------------------------------------------- cache --

def test_the_prepared_cache_is_bounded_in_text_and_evicts_the_least_recently_used() -> None:
    r = reqp()
    texts = [padded(f"RETRIEVE ((FILE = Census) and (POP = {i})) (CITY)", MAX_TEXT)
             for i in range(CACHE_TEXT // MAX_TEXT + 1)]
    first = [r.prepare(t) for t in texts[:-1]]          # exactly the cache's text budget
    assert all(r.prepare(t) is p for t, p in zip(texts, first, strict=False))
    assert r.prepare(texts[0]) is first[0]              # now the most recently used
    r.prepare(texts[-1])                                # evicts texts[1], the least
    assert r.prepare(texts[0]) is first[0]
    assert r.prepare(texts[1]) is not first[1]


# ------------------------------------------------------- through gRPC --

def census(cluster_factory) -> Running:
    r = cluster_factory(2)
    r.client.define(CENSUS_YAML)
    r.client.execute("[" + "; ".join(INSERT.format(c=f"c{i}", p=i) for i in range(5)) + "]")
    return r


def snapshot(r: Running) -> list[str]:
    [res] = r.client.execute("RETRIEVE (FILE = Census) (ALL)")
    return sorted(map(repr, res.records))


def call(r: Running, text: str, timeout_s: float = 0.0) -> tuple[str, str]:
    """(status, message) of `text` as an Execute call of its own."""
    try:
        for _ in r.client.stub.Execute(pb.ExecuteRequest(text=text, timeout_s=timeout_s),
                                       timeout=60):
            pass
    except grpc.RpcError as e:
        return e.code().name, e.details() or ""
    return "OK", ""


def session(r: Running, text: str, timeout_s: float = 0.0) -> tuple[str, str]:
    """(status, message) of `text` as the one request of a Session stream."""
    for batch in r.client.stub.Session(iter([pb.ExecuteRequest(text=text, timeout_s=timeout_s)]),
                                       timeout=60):
        if batch.end:
            if batch.HasField("failure"):
                return batch.failure.code, batch.failure.message
            return "OK", ""
    return "NO END", ""


def test_bad_timeout_s_is_refused_and_inserts_nothing(cluster_factory) -> None:
    r = census(cluster_factory)
    before = snapshot(r)
    text = INSERT.format(c="late", p=1)
    for ask in (call, session):
        for timeout_s in (math.nan, -1.0, math.inf):
            code, message = ask(r, text, timeout_s)
            assert code == "INVALID_ARGUMENT" and "timeout_s" in message, (ask, timeout_s)
    assert snapshot(r) == before
    assert call(r, text) == ("OK", "")          # 0: the controller's default
    assert len(snapshot(r)) == len(before) + 1


def test_integers_beyond_64_bits_are_refused_through_grpc_and_the_bounds_kept(
        cluster_factory) -> None:
    r = census(cluster_factory)
    before = snapshot(r)
    for text in (INSERT.format(c="big", p=BIG),
                 f"UPDATE (FILE = Census) <POP = POP - {INT64_MAX + 1}>",
                 f"DELETE ((FILE = Census) and (POP < {BIG}))"):
        for ask in (call, session):
            code, message = ask(r, text)
            assert code == "INVALID_ARGUMENT" and RANGE in message, (ask, text)
    # A bulk load names the record whose integer the wire cannot carry.
    with pytest.raises(ClientError) as err:
        list(r.client.load("CENSUS", ["CITY", "POP"], [(["ok", 1], None), (["big", BIG], None)]))
    assert err.value.code == "INVALID_ARGUMENT" and "record 2" in str(err.value)
    assert RANGE in str(err.value)
    assert snapshot(r) == before
    r.client.execute(INSERT.format(c="max", p=INT64_MAX))
    list(r.client.load("CENSUS", ["CITY", "POP"], [(["min", INT64_MIN], None)]))
    [res] = r.client.execute("RETRIEVE ((FILE = Census) and (CITY = max)) or "
                             "((FILE = Census) and (CITY = min)) (CITY, POP)")
    assert sorted(map(repr, res.records)) == [repr({"CITY": "max", "POP": INT64_MAX}),
                                              repr({"CITY": "min", "POP": INT64_MIN})]


def test_size_bounds_refuse_the_whole_unit_through_grpc(cluster_factory) -> None:
    r = census(cluster_factory)
    before = snapshot(r)
    ghost = INSERT.format(c="ghost", p=1)
    texts = [padded(f"[{ghost}]", MAX_TEXT + 1),
             f"[{ghost}; DELETE {disjunction(MAX_PREDICATES + 1)}]",
             "[" + "; ".join([ghost] * (MAX_REQUESTS + 1)) + "]"]
    for text in texts:
        for ask in (call, session):
            code, message = ask(r, text)
            assert code == "INVALID_ARGUMENT" and "at most" in message, (ask, text[:60])
    assert snapshot(r) == before
    # The most predicates a request may have are within what the backends' SQLite takes.
    [res] = r.client.execute(f"RETRIEVE {disjunction(MAX_PREDICATES, value='{i}.5')} (CITY)")
    assert len(res.records) == 5


def test_long_names_come_back_shortened_through_execute_sessions_and_load(
        cluster_factory) -> None:
    r = census(cluster_factory)
    before = snapshot(r)
    for ask in (call, session):
        code, message = ask(r, f"INSERT (<FILE, Census>, <{LONG}, 1>)")
        assert code == "INVALID_ARGUMENT" and shortened(message, len(LONG)), ask
    long = "X" * 10_000_000
    for file, attrs in ((long, ["POP"]), ("CENSUS", [long])):
        with pytest.raises(ClientError) as e:
            list(r.client.load(file, attrs, [([1], None)]))
        assert e.value.code == "INVALID_ARGUMENT" and shortened(str(e.value), len(long))
    assert snapshot(r) == before
