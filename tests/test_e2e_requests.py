"""Every request kind through the real system with 1, 2 and 3 backends, each answer
checked against the independent in-memory evaluation of tests/model.py."""

from __future__ import annotations

import random

import pytest

from mbds.client import ClientError
from tests.conftest import CENSUS_SCHEMAS, CENSUS_YAML, Running, backend_digests, module_cluster
from tests.model import Model, canon

CITIES = ["Monterey", "Carmel", "Salinas", "San Jose", "Albany", "Buffalo", "Ithaca"]


def seed_inserts(rng: random.Random, count: int) -> list[str]:
    out = []
    for i in range(count):
        city = rng.choice(CITIES) + (str(i % 5) if i % 3 == 0 else "")
        state = rng.choice(["CA", "NY", "TX"])         # TX: STATE's no-descriptor class
        parts = ["<FILE, Census>", f"<CITY, '{city}'>", f"<POP, {rng.randint(0, 7000)}>",
                 f"<STATE, {state}>"]
        if i % 4:
            parts.append(f"<AREA, {rng.uniform(1, 100):.3f}>")
        body = " {a town's notes}" if i % 10 == 0 else ""
        out.append(f"INSERT ({', '.join(parts)}){body}")
    return out


WORKLOAD = [
    "INSERT (<FILE, States>, <CODE, CA>, <NAME, California>, <REGION, West>)",
    "INSERT (<FILE, States>, <CODE, NY>, <NAME, 'New York'>, <REGION, East>)",
    "RETRIEVE (FILE = Census) (CITY, POP, AREA, STATE)",
    "RETRIEVE ((FILE = Census) and (POP > 1000)) (CITY, POP)",
    "RETRIEVE ((FILE = Census) and (POP >= 5000)) or ((FILE = Census) and (STATE = NY)) (CITY)",
    "RETRIEVE ((FILE = Census) and (CITY = Monterey)) or ((FILE = Census) and "
    "(CITY = 'San Jose')) (CITY, POP)",
    "RETRIEVE ((FILE = Census) and (STATE != CA) and (POP < 3000)) (ALL)",
    "RETRIEVE ((FILE = Census) and (AREA <= 50.5)) (CITY, AREA)",
    "RETRIEVE (FILE = Census) (AVG(POP), COUNT(CITY), SUM(POP), MIN(AREA), MAX(AREA))",
    "RETRIEVE (FILE = Census) (AVG(POP), COUNT(AREA)) BY STATE",
    "RETRIEVE ((FILE = Census) and (POP > 99999)) (COUNT(POP), AVG(POP))",
    "RETRIEVE (FILE = Census) (STATE, MAX(POP), MIN(CITY)) BY STATE",
    "RETRIEVE ((FILE = Census) and (POP < 2000)) (CITY, STATE) COMMON (STATE, CODE) "
    "RETRIEVE (FILE = States) (NAME, REGION)",
    # A right side that reaches both files: its clashing column is RIGHT.CITY.
    "RETRIEVE ((FILE = Census) and (POP < 2000)) (CITY, STATE) COMMON (STATE, STATE) "
    "RETRIEVE (FILE != Nowhere) (CITY, POP)",
    "UPDATE ((FILE = Census) and (CITY = Monterey)) <POP = POP + 5000>",
    "UPDATE ((FILE = Census) and (STATE = TX)) <STATE = NY>",
    "UPDATE ((FILE = Census) and (POP < 500)) <CITY = 'Smallville'>",
    "UPDATE ((FILE = Census) and (STATE = CA)) <AREA = AREA * 2>",
    "UPDATE ((FILE = Census) and (POP > 3000)) <POP = POP / 3>",
    "UPDATE ((FILE = Census) and (STATE = NY)) <AREA = AREA - 0.5>",
    "UPDATE ((FILE = Census) and (POP >= 100) and (POP < 150)) <POP = POP - 7>",
    "UPDATE ((FILE = Census) and (STATE = NY)) <CITY = STATE>",
    "RETRIEVE (FILE = Census) (CITY, POP, AREA, STATE)",
    "RETRIEVE (FILE = Census) (COUNT(POP)) BY CITY",
    "DELETE ((FILE = Census) and (POP < 100))",
    "DELETE ((FILE = Census) and (CITY = Smallville)) or ((FILE = Census) and (AREA > 150))",
    "[ INSERT (<FILE, Census>, <CITY, Carmel>, <POP, 3800>, <STATE, CA>); "
    "RETRIEVE (FILE = Census) (COUNT(CITY)); "
    "UPDATE ((FILE = Census) and (CITY = Carmel)) <POP = 1>; "
    "RETRIEVE ((FILE = Census) and (CITY = Carmel)) (CITY, POP) ]",
    "RETRIEVE (FILE = Census) (CITY, POP, AREA, STATE)",
    "RETRIEVE (POP > 10) (CITY)",
]


def _defined(r: Running) -> None:
    reply = r.client.define(CENSUS_YAML)
    assert sorted(reply.files_created) == ["CENSUS", "STATES"]


census = module_cluster("census", [1, 2, 3], _defined)


def test_workload_matches_independent_evaluation(census: Running) -> None:
    # The model starts empty: so do the files, whichever tests of the module ran before.
    census.client.execute("[DELETE (FILE = Census); DELETE (FILE = States)]")
    model = Model(CENSUS_SCHEMAS)
    rng = random.Random(7)
    inserts = seed_inserts(rng, 120)
    # Half as single inserts, half as one transaction.
    for text in inserts[:60]:
        [res] = census.client.execute(text)
        model.run(text)
        assert res.op == "INSERT" and res.stats["records_retrieved"] == 1
    tx = "[" + "; ".join(inserts[60:]) + "]"
    assert len(census.client.execute(tx)) == 60
    model.run(tx)
    for text in WORKLOAD:
        got = census.client.execute(text)
        want = model.run(text)
        assert [g.op for g in got] == [w["op"] for w in want], text
        for g, w in zip(got, want, strict=True):
            if "records" in w:
                assert canon(g.records) == canon(w["records"]), text
            if g.op in ("UPDATE", "DELETE", "INSERT"):
                assert g.stats["records_retrieved"] == w["count"], text


def test_update_of_directory_attribute_moves_records_to_their_cluster(census: Running) -> None:
    c = census.client
    c.execute("INSERT (<FILE, Census>, <CITY, Mover>, <POP, 10>, <STATE, CA>)")
    [before] = c.execute("RETRIEVE ((FILE = Census) and (CITY = Mover) and (POP <= 999)) (CITY)")
    assert len(before.records) == 1
    c.execute("UPDATE ((FILE = Census) and (CITY = Mover)) <POP = 4000>")
    # Found through the new cluster's descriptors, and no longer through the old ones.
    [hit] = c.execute("RETRIEVE ((FILE = Census) and (POP >= 1000) and (CITY = Mover)) (POP)")
    [miss] = c.execute("RETRIEVE ((FILE = Census) and (POP <= 999) and (CITY = Mover)) (POP)")
    assert hit.records == [{"POP": 4000}] and miss.records == []
    # Into a type-C value never seen before: IIG allocates it centrally.
    c.execute("UPDATE ((FILE = Census) and (CITY = Mover)) <CITY = 'Brand New Town'>")
    [moved] = c.execute("RETRIEVE ((FILE = Census) and (CITY = 'Brand New Town')) (CITY, POP)")
    assert moved.records == [{"CITY": "Brand New Town", "POP": 4000}]
    assert moved.stats["clusters_examined"] == 1
    assert len(set(backend_digests(census))) == 1


def test_a_transaction_finds_the_records_it_moved_to_a_new_value(census: Running) -> None:
    """A transaction's later requests find a record an earlier one of it moved to a
    type-C value new to the directory (its descriptor made after the unit's descriptor
    search): read, updated and counted where it now is."""
    c = census.client
    c.execute("INSERT (<FILE, Census>, <CITY, Stayer>, <POP, 20>, <STATE, NY>)")
    got = c.execute("[ UPDATE ((FILE = Census) and (CITY = Stayer)) <CITY = 'Newly Named'>; "
                    "RETRIEVE ((FILE = Census) and (CITY = 'Newly Named')) (POP); "
                    "UPDATE ((FILE = Census) and (CITY = 'Newly Named')) <POP = 30>; "
                    "RETRIEVE ((FILE = Census) and (CITY > 'Newly Name') and "
                    "(CITY < 'Newly Namf')) (COUNT(POP)) ]")
    assert [r.stats["records_retrieved"] for r in got[::2]] == [1, 1]
    assert got[1].records == [{"POP": 20}]
    assert got[3].records == [{"COUNT(POP)": 1}]
    [after] = c.execute("RETRIEVE ((FILE = Census) and (CITY = 'Newly Named')) (POP)")
    assert after.records == [{"POP": 30}]
    c.execute("DELETE ((FILE = Census) and (CITY = 'Newly Named'))")


def test_one_update_over_files_moves_records_only_where_the_attribute_addresses(
        census: Running) -> None:
    """A conjunction without FILE reaches every file with its attributes: here LEVEL is a
    directory attribute of one file and a plain one of the other, so one UPDATE moves
    the first file's records to their new clusters and changes the second's in place."""
    c = census.client
    c.define("files:\n  TANKS:\n    attributes: {TAG: string, LEVEL: integer}\n"
             "    directory:\n      LEVEL: {type: A, ranges: [[0, 9], [10, 99]]}\n"
             "  PIPES:\n    attributes: {TAG: string, LEVEL: integer}\n")
    c.execute("[INSERT (<FILE, Tanks>, <TAG, t>, <LEVEL, 1>); "
              "INSERT (<FILE, Pipes>, <TAG, p>, <LEVEL, 1>)]")
    c.execute("UPDATE (LEVEL < 10) <LEVEL = 50>")
    [res] = c.execute("RETRIEVE (LEVEL >= 10) (TAG, LEVEL)")
    assert sorted(r["TAG"] for r in res.records) == ["p", "t"]
    assert res.stats["clusters_examined"] <= 2        # TANKS: only [10, 99]'s cluster
    assert len(set(backend_digests(census))) == 1


def test_aggregates_and_groups_of_file_body_and_attributes_a_file_lacks(
        census: Running) -> None:
    """FILE and BODY are what every record has (its file's name, its body), and a file
    without the BY attribute groups its records under null, as SQL groups a null."""
    c = census.client
    c.define("files:\n  KEYED:\n    attributes: {TAG: string, DEPTH: integer, K: string}\n"
             "  PLAIN:\n    attributes: {TAG: string, DEPTH: integer}\n")
    c.execute("[INSERT (<FILE, Keyed>, <TAG, a>, <DEPTH, 1>, <K, x>) {a body}; "
              "INSERT (<FILE, Keyed>, <TAG, b>, <DEPTH, 2>, <K, x>); "
              "INSERT (<FILE, Plain>, <TAG, c>, <DEPTH, 3>) {another}]")
    [res] = c.execute("RETRIEVE (DEPTH > 0) (COUNT(BODY), COUNT(FILE), MAX(FILE))")
    assert res.records == [{"COUNT(BODY)": 2, "COUNT(FILE)": 3, "MAX(FILE)": "PLAIN"}]
    [res] = c.execute("RETRIEVE (DEPTH > 0) (COUNT(TAG), SUM(DEPTH)) BY FILE")
    assert sorted(res.records, key=lambda r: r["FILE"]) == [
        {"FILE": "KEYED", "COUNT(TAG)": 2, "SUM(DEPTH)": 3},
        {"FILE": "PLAIN", "COUNT(TAG)": 1, "SUM(DEPTH)": 3}]
    [res] = c.execute("RETRIEVE (DEPTH > 0) (COUNT(TAG)) BY K")
    assert sorted(res.records, key=repr) == sorted(
        [{"K": "x", "COUNT(TAG)": 2}, {"K": None, "COUNT(TAG)": 1}], key=repr)


def test_sums_beyond_64_bits_are_refused_alike_and_other_aggregates_answer(
        census: Running) -> None:
    """A SUM whose total is beyond 64-bit integers is refused with the same words with
    and without BY; COUNT, MIN and MAX of the same records do not sum them, and AVG (a
    float) sums as one."""
    c = census.client
    top = 2 ** 63 - 1
    c.define("files:\n  BIGS:\n    attributes: {N: integer, G: string}\n")
    c.execute(f"[INSERT (<FILE, Bigs>, <N, {top}>, <G, a>); "
              f"INSERT (<FILE, Bigs>, <N, {top}>, <G, a>); INSERT (<FILE, Bigs>, <N, 5>, <G, b>)]")
    for text in ("RETRIEVE (FILE = Bigs) (SUM(N))", "RETRIEVE (FILE = Bigs) (SUM(N)) BY G"):
        with pytest.raises(ClientError) as err:
            c.execute(text)
        assert err.value.code == "ABORTED"
        assert str(err.value).endswith("SUM(N): a sum beyond 64-bit integers")
    [res] = c.execute("RETRIEVE ((FILE = Bigs) and (N > 100)) (COUNT(N), MIN(N), MAX(N)) BY G")
    assert res.records == [{"G": "a", "COUNT(N)": 2, "MIN(N)": top, "MAX(N)": top}]
    [res] = c.execute("RETRIEVE (FILE = Bigs) (AVG(N))")
    assert res.records == [{"AVG(N)": (2 * top + 5) / 3}]


def test_a_sum_that_fits_is_answered_whatever_the_order_of_its_records(
        census: Running) -> None:
    """Only the total must fit in 64 bits: SQLite's running sum of 2^63 - 1, then ones,
    then minus ones, leaves the range on the way, and the same records in another order
    would not."""
    c = census.client
    top = 2 ** 63 - 1
    c.define("files:\n  ORDERED:\n    attributes: {N: integer, G: string}\n")
    values = [top] + [1] * 8 + [-1] * 8 + [-top, -top, -1]
    c.execute("[" + "; ".join(f"INSERT (<FILE, Ordered>, <N, {v}>, <G, g>)"
                              for v in values) + "]")
    [res] = c.execute("RETRIEVE ((FILE = Ordered) and (N > -5)) (SUM(N), COUNT(N))")
    assert res.records == [{"SUM(N)": top - 1, "COUNT(N)": 18}]
    [res] = c.execute("RETRIEVE ((FILE = Ordered) and (N > -5)) (SUM(N)) BY G")
    assert res.records == [{"G": "g", "SUM(N)": top - 1}]
    with pytest.raises(ClientError) as err:          # −2^64 + 1 does not fit
        c.execute("RETRIEVE ((FILE = Ordered) and (N < 5)) (SUM(N)) BY G")
    assert str(err.value).endswith("SUM(N): a sum beyond 64-bit integers")


def test_min_max_and_groups_over_files_that_type_an_attribute_differently(
        census: Running) -> None:
    """One attribute name, a string in one file and an integer in another: MIN, MAX and
    the order of BY groups put numbers before strings, as SQLite does."""
    c = census.client
    c.define("files:\n  WORDS:\n    attributes: {V: string, W: string}\n"
             "  NUMBERS:\n    attributes: {V: integer, W: string}\n")
    c.execute("[INSERT (<FILE, Words>, <V, apple>, <W, x>); "
              "INSERT (<FILE, Numbers>, <V, 7>, <W, x>); INSERT (<FILE, Numbers>, <V, 9>, <W, x>)]")
    [res] = c.execute("RETRIEVE (W = x) (MIN(V), MAX(V), COUNT(V))")
    assert res.records == [{"MIN(V)": 7, "MAX(V)": "apple", "COUNT(V)": 3}]
    [res] = c.execute("RETRIEVE (W = x) (COUNT(W)) BY V")
    assert res.records == [{"V": 7, "COUNT(W)": 1}, {"V": 9, "COUNT(W)": 1},
                           {"V": "apple", "COUNT(W)": 1}]


def test_an_integer_literal_compares_exactly_where_one_file_holds_integers(
        census: Running) -> None:
    """Q is an integer in one file and a float in another: a literal beyond 2**53 is not
    made a float for both (the integer file would match its neighbour), and an UPDATE's
    integer value is stored in each file as its type holds it."""
    c = census.client
    big = 2 ** 53
    c.define("files:\n  EXACT:\n    attributes: {Q: integer, R: string}\n"
             "    directory:\n      Q: {type: C}\n"
             "  ROUGH:\n    attributes: {Q: float, R: string}\n")
    c.execute(f"[INSERT (<FILE, Exact>, <Q, {big + 1}>, <R, odd>); "
              f"INSERT (<FILE, Exact>, <Q, {big}>, <R, even>); "
              f"INSERT (<FILE, Rough>, <Q, {float(big)!r}>, <R, rough>)]")
    [res] = c.execute(f"RETRIEVE (Q = {big + 1}) (R)")
    assert res.records == [{"R": "odd"}]
    [res] = c.execute(f"RETRIEVE (Q = {big}) (R)")
    assert sorted(x["R"] for x in res.records) == ["even", "rough"]
    c.execute(f"UPDATE (Q = {big}) <Q = 7>")
    [res] = c.execute("RETRIEVE (Q = 7) (Q, R)")
    assert sorted(res.records, key=lambda x: x["R"]) == [{"Q": 7, "R": "even"},
                                                          {"Q": 7.0, "R": "rough"}]


def test_a_bare_word_modifier_has_one_reading_over_every_file(census: Running) -> None:
    """`<A = Word>` copies attribute WORD where there is one and sets the string Word
    where there is none: over files of which only some have WORD it would do both in one
    request, so it is refused, naming the files, and changes nothing; quoted, it sets the
    string everywhere."""
    c = census.client
    c.define("files:\n  NOTED:\n    attributes: {MARK: string, NOTE: string}\n"
             "  BARE:\n    attributes: {MARK: string}\n")
    c.execute("[INSERT (<FILE, Noted>, <MARK, n>, <NOTE, kept>); INSERT (<FILE, Bare>, <MARK, b>)]")
    with pytest.raises(ClientError) as err:
        c.execute("UPDATE (MARK != zzz) <MARK = Note>")
    assert err.value.code == "INVALID_ARGUMENT"
    assert "Note is an attribute of file NOTED but not of file BARE" in str(err.value)
    [res] = c.execute("RETRIEVE (MARK != zzz) (MARK)")
    assert sorted(r["MARK"] for r in res.records) == ["b", "n"]
    c.execute("UPDATE (MARK != zzz) <MARK = 'Note'>")
    [res] = c.execute("RETRIEVE (MARK = Note) (FILE)")
    assert sorted(r["FILE"] for r in res.records) == ["BARE", "NOTED"]
    c.execute("UPDATE (FILE = Noted) <MARK = Note>")         # one file: a copy
    [res] = c.execute("RETRIEVE (FILE = Noted) (MARK)")
    assert res.records == [{"MARK": "kept"}]


def test_record_body_round_trips(census: Running) -> None:
    c = census.client
    c.execute("INSERT (<FILE, Census>, <CITY, Bodied>, <POP, 1>) {line one\nline \\} two}")
    [r] = c.execute("RETRIEVE ((FILE = Census) and (CITY = Bodied)) (ALL)")
    assert r.records == [{"FILE": "CENSUS", "CITY": "Bodied", "POP": 1, "AREA": None,
                          "STATE": None, "BODY": "line one\nline } two"}]
    # An attribute named beside ALL, before or after it, is one column where it first
    # comes; named twice without ALL, it is refused.
    for targets, first in (("ALL, POP", "FILE"), ("POP, ALL", "POP")):
        [r] = c.execute(f"RETRIEVE ((FILE = Census) and (CITY = Bodied)) ({targets})")
        assert r.records[0]["POP"] == 1 and list(r.records[0])[0] == first, r.records
        assert len(r.records[0]) == 6
    with pytest.raises(ClientError, match="target POP appears twice"):
        c.execute("RETRIEVE ((FILE = Census) and (CITY = Bodied)) (POP, CITY, POP)")


def test_large_bodies_stream_in_batches_under_the_message_limit(census: Running) -> None:
    c = census.client
    body = "x" * 200_000                 # 40 records of 200 KB: 8 MB in one answer
    c.execute("[" + "; ".join(f"INSERT (<FILE, Census>, <CITY, Big{i}>) {{{body}}}"
                              for i in range(40)) + "]")
    batches = [r.rows.count for r in c.stream(
        "RETRIEVE ((FILE = Census) and (CITY >= Big) and (CITY < Bih)) (CITY, BODY)")
        if r.WhichOneof("body") == "rows"]
    assert sum(batches) == 40 and len(batches) > 1
    [res] = c.execute("RETRIEVE ((FILE = Census) and (CITY = Big7)) (BODY)")
    assert res.records == [{"BODY": body}]


@pytest.mark.parametrize("value", [0.1, 1e-7, 123456789.125, -2.5e300, 5e-324, 7.0,
                                   0.30000000000000004, 1.2345678901234567, 2 / 3,
                                   1.7976931348623157e308, 2.2250738585072014e-308])
def test_floats_round_trip_exactly(census: Running, value: float) -> None:
    """Rows are encoded to JSON by SQLite on the backend: every float comes back equal,
    its 17 significant digits too, and an equality on what came back finds it."""
    c = census.client
    c.execute(f"INSERT (<FILE, Census>, <CITY, Floaty>, <POP, 1>, <AREA, {value!r}>)")
    [r] = c.execute("RETRIEVE ((FILE = Census) and (CITY = Floaty)) (AREA, POP)")
    assert r.records == [{"AREA": value, "POP": 1}]
    assert isinstance(r.records[0]["AREA"], float)
    [again] = c.execute(f"RETRIEVE ((FILE = Census) and (AREA = {r.records[0]['AREA']!r})) "
                        "(CITY)")
    assert again.records == [{"CITY": "Floaty"}]
    c.execute("DELETE ((FILE = Census) and (CITY = Floaty))")


def test_strings_and_integers_round_trip_exactly(census: Running) -> None:
    c = census.client
    names = ["quote ' and \" both", "back\\slash", "tab\tand\u0001control",
             "caf\u00e9 \u65e5\u672c", "emoji \U0001f600", "", "  spaced  "]
    for i, name in enumerate(names):
        quoted = "'" + name.replace("\\", "\\\\").replace("'", "\\'") + "'"
        c.execute(f"INSERT (<FILE, Census>, <CITY, {quoted}>, <POP, {2**62 + i}>)")
    [r] = c.execute("RETRIEVE ((FILE = Census) and (POP >= 4611686018427387904)) (CITY, POP)")
    assert sorted((x["POP"], x["CITY"]) for x in r.records) == [
        (2**62 + i, name) for i, name in enumerate(names)]



SPREAD_YAML = """
files:
  SPREAD:
    attributes: {K: integer, V: integer}
    directory:
      K: {type: A, ranges: [[0, 9], [10, 19]]}
"""


def test_each_cluster_is_spread_and_averages_weigh_every_record(census: Running) -> None:
    """Records of two clusters inserted alternately end up spread evenly (±1) over the
    backends within each cluster; an average over a cluster whose records are spread
    unevenly (3 and 2 on two backends) is the average of its records."""
    c = census.client
    c.define(SPREAD_YAML)
    for v in range(10):
        c.execute(f"INSERT (<FILE, Spread>, <K, 1>, <V, {v}>)")
        c.execute(f"INSERT (<FILE, Spread>, <K, 11>, <V, {v}>)")
    n = census.cluster.n
    for k in (1, 11):
        [res] = c.execute(f"RETRIEVE ((FILE = Spread) and (K = {k})) (V)")
        per = [b["records"] for b in res.stats["backends"]]
        assert len(per) == n and sum(per) == 10 and max(per) - min(per) <= 1, (k, per)
    values = [1, 2, 9, 20, 3]       # no split of these into 3 and 2 has equal averages
    for v in values:
        c.execute(f"INSERT (<FILE, Spread>, <K, 5>, <V, {v}>)")
    [res] = c.execute("RETRIEVE ((FILE = Spread) and (K = 5)) (AVG(V), SUM(V), COUNT(V))")
    assert res.records == [{"AVG(V)": 7.0, "SUM(V)": 35, "COUNT(V)": 5}]
    assert sorted(b["records"] for b in res.stats["backends"]) == sorted(
        len(values[i::n]) for i in range(n))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_an_integer_sum_is_answered_alike_on_any_number_of_backends(
        cluster_factory, n: int) -> None:
    """A backend's part may leave 64 bits where the total does not (on three backends,
    one holds 2^63 - 1 and 1): each part comes exactly, so the answer does not depend on
    how many backends there are or where the records are."""
    c = cluster_factory(n).client
    top, bottom = 2**63 - 1, -2**63
    c.define("files:\n  PARTS:\n    attributes: {K: integer}\n")
    c.execute("[" + "; ".join(f"INSERT (<FILE, Parts>, <K, {v}>)"
                              for v in (top, top, bottom, bottom, 1, 1)) + "]")
    [res] = c.execute("RETRIEVE (FILE = Parts) (SUM(K), COUNT(K))")
    assert res.records == [{"SUM(K)": 0, "COUNT(K)": 6}]


@pytest.mark.parametrize("n", [1, 2])
def test_a_float_sum_beyond_a_double_is_refused_on_any_number_of_backends(
        cluster_factory, n: int) -> None:
    """Whether one backend's part or only the total leaves a double's range, SUM and AVG
    are refused naming the item (as PostgreSQL refuses them), never answered as inf."""
    c = cluster_factory(n).client
    c.define("files:\n  HUGE:\n    attributes: {V: float}\n")
    c.execute("[INSERT (<FILE, Huge>, <V, 1e308>); INSERT (<FILE, Huge>, <V, 1e308>)]")
    for item in ("SUM(V)", "AVG(V)"):
        with pytest.raises(ClientError) as err:
            c.execute(f"RETRIEVE (FILE = Huge) ({item}, MAX(V))")
        assert err.value.code == "ABORTED"
        assert str(err.value).endswith(f"{item}: a sum beyond the range of a double"), err.value
    [res] = c.execute("RETRIEVE (FILE = Huge) (MAX(V), COUNT(V))")
    assert res.records == [{"MAX(V)": 1e308, "COUNT(V)": 2}]


def test_an_update_subtracting_the_lowest_integer_is_taken_as_written(census: Running) -> None:
    """`K -9223372036854775808` (a signed number after the attribute) subtracts 2^63:
    answered, not refused for a number the request never held (+2^63)."""
    c = census.client
    c.define("files:\n  LOWEST:\n    attributes: {K: integer}\n")
    c.execute("INSERT (<FILE, Lowest>, <K, 5>)")
    c.execute("UPDATE (FILE = Lowest) <K = K -9223372036854775808>")
    [res] = c.execute("RETRIEVE (FILE = Lowest) (K)")
    assert res.records == [{"K": 5 - 2**63}]
