"""AVG of an integer attribute through the real system: the exact sum over the count,
whichever backends hold the records."""

from __future__ import annotations

V = [2**62] * 3 + [1] * 3 + [-2**62] * 3 + [None]
K = [1, 2, 1, 1, 2, 2, 1, 2, 1, 1]


def test_an_integer_avg_is_exact_and_the_same_on_one_and_three_backends(
        cluster_factory) -> None:
    """2^62, 1 and -2^62 (three of each) average 1/3: a double's running sum would lose
    the 1s on any backend holding one beside 2^62. Nulls are not counted; a float
    attribute's AVG stays a float."""
    answers = []
    for n in (1, 3):
        c = cluster_factory(n, name=f"data{n}").client
        c.define("files:\n  A:\n    attributes: {K: integer, V: integer, F: float}\n")
        for k, v in zip(K, V, strict=True):
            value = "" if v is None else f", <V, {v}>"
            c.execute(f"INSERT (<FILE, A>, <K, {k}>{value}, <F, 0.5>)")
        [whole] = c.execute("RETRIEVE (FILE = A) (SUM(V), COUNT(V), AVG(V), AVG(F))")
        [by_k] = c.execute("RETRIEVE (FILE = A) (K, AVG(V), SUM(V)) BY K")
        answers.append((whole.records, by_k.records))
    pairs = [(k, v) for k, v in zip(K, V, strict=True) if v is not None]
    by_k = [{"K": k, "AVG(V)": sum(v for kk, v in pairs if kk == k)
             / sum(kk == k for kk, _ in pairs),
             "SUM(V)": sum(v for kk, v in pairs if kk == k)} for k in (1, 2)]
    assert by_k[0]["AVG(V)"] == 1 / 5 and by_k[1]["AVG(V)"] == 2 / 4
    assert answers == [([{"SUM(V)": 3, "COUNT(V)": 9, "AVG(V)": 1 / 3, "AVG(F)": 0.5}],
                        by_k)] * 2
