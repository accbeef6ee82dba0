"""The Grafana dashboards: committed JSON is the generator's output, valid against
Grafana's published dashboard JSON schema, and well formed.

No Grafana needed: the schema (dashboards/schema/, from Grafana's foundation SDK),
structure (ids, grid, datasource variable, queries, variables) and the provisioning
files that tie the JSON to the compose deployment. Whether the queries return data
is tests/test_prometheus.py's job.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "dashboards" / "generate.py"
JSON_DIR = ROOT / "dashboards" / "json"
PROVISIONING = ROOT / "dashboards" / "provisioning"
SCHEMA_DIR = ROOT / "dashboards" / "schema"
DATASOURCE = "${datasource}"
PANEL_TYPES = {"row", "timeseries", "stat", "table", "heatmap", "piechart", "bargauge"}
MACROS = {"$__rate_interval", "$__interval", "$__range"}
FILES = sorted(JSON_DIR.glob("*.json"))


def provisioned_datasource() -> dict:
    doc = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    [ds] = doc["datasources"]
    assert ds["type"] == "prometheus"
    assert ds["url"] == "http://prometheus:9090"     # the compose service
    return ds


def dashboard_path() -> str:
    doc = yaml.safe_load((PROVISIONING / "dashboards" / "mbds.yaml").read_text())
    [provider] = doc["providers"]
    assert provider["type"] == "file"
    return provider["options"]["path"]


def all_panels(d: dict) -> list[dict]:
    out = []
    for p in d["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def test_committed_json_is_the_generators_output(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(GENERATOR), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    generated = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    committed = {p.name: p.read_text() for p in FILES}
    assert sorted(generated) == sorted(committed), "run: python dashboards/generate.py"
    for name, text in generated.items():
        assert committed[name] == text, f"{name} is stale: run python dashboards/generate.py"
    check = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_expected_dashboards_exist() -> None:
    assert {p.stem for p in FILES} >= {"overview", "handlers", "backends", "cc", "table8"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_dashboard_structure(path: Path) -> None:
    text = path.read_text()
    d = json.loads(text)
    assert text == json.dumps(d, indent=2, sort_keys=True) + "\n", "stable key order"
    assert d["uid"].startswith("mbds-") and len(d["uid"]) <= 40
    assert d["schemaVersion"] == 39 and "id" not in d and d["title"]

    panels = all_panels(d)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert all(isinstance(i, int) and i > 0 for i in ids)

    variables = {v["name"]: v for v in d["templating"]["list"]}
    # The first variable picks the data source; it defaults to the provisioned one.
    first, *queries = d["templating"]["list"]
    ds = provisioned_datasource()
    assert (first["name"], first["type"], first["query"]) == ("datasource", "datasource",
                                                              "prometheus")
    assert first["current"]["value"] == ds["uid"] and first["current"]["text"] == ds["name"]
    for v in queries:
        assert v["type"] == "query"
        assert v["datasource"] == {"type": "prometheus", "uid": DATASOURCE}
        assert re.fullmatch(r"label_values\(\w+, *\w+\)", v["query"]), v["query"]
        assert v["allValue"] == ".*"

    boxes = []
    for p in panels:
        assert p["type"] in PANEL_TYPES, p["type"]
        g = p["gridPos"]
        assert {"h", "w", "x", "y"} <= set(g) and all(isinstance(g[k], int) for k in g)
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["y"] >= 0
        assert g["x"] + g["w"] <= 24, p["title"]
        boxes.append((p["title"], g))
        if p.get("repeat"):
            assert p["repeat"] in variables
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": DATASOURCE}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["datasource"] == {"type": "prometheus", "uid": DATASOURCE}
            expr = t.get("expr", "")
            assert expr.strip(), f"{p['title']}: target {t['refId']} has no expr"
            assert expr.count("(") == expr.count(")"), expr
            for name in re.findall(r"\$\{?(\w+)", expr):
                assert f"${name}" in MACROS or name in variables, f"${name} in {expr}"
            # Every window is a Grafana macro: no hard-coded [5m].
            for window in re.findall(r"\[([^\]]+)\]", expr):
                assert window in ("$__rate_interval", "$__range"), expr
            for var in variables:
                assert f'"${var}"' not in expr or f'=~"${var}"' in expr, \
                    f"${var} must be a regex match (All is .*): {expr}"
        for text_ in (p["title"], p.get("description", "")):
            for name in re.findall(r"\$(\w+)", text_):
                assert name in variables, f"${name} in {text_}"

    for (ta, a), (tb, b) in combinations(boxes, 2):
        overlap = (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
                   and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])
        assert not overlap, f"panels {ta!r} and {tb!r} overlap"


def test_uids_and_titles_are_unique() -> None:
    docs = [json.loads(p.read_text()) for p in FILES]
    assert len({d["uid"] for d in docs}) == len(docs)
    assert len({d["title"] for d in docs}) == len(docs)


def test_compose_mounts_what_the_provisioning_expects() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    grafana = compose["services"]["grafana"]
    assert grafana["image"].startswith("grafana/grafana:11.2")
    mounts = {}
    for v in grafana["volumes"]:
        src, dst = v.split(":")[:2]
        mounts[dst] = src.rstrip("/")
    assert mounts.get(dashboard_path()) == "./dashboards/json"
    assert mounts.get("/etc/grafana/provisioning") == "./dashboards/provisioning"
    assert "prometheus" in compose["services"]


# ------------------------------------------------------------- the schema --
# Where Grafana 11.2's published schema is narrower than the JSON Grafana writes and
# reads: (schema file, definition, property, the types allowed here or None for any, why).
WIDENED = [
    ("dashboard", "Threshold", "value", ["number", "null"],
     "a base step's value is -Infinity, written as null (the schema's own description)"),
    ("dashboard", "MatcherConfig", "options", None,
     "Grafana's `options?: _` is any value; byName takes the field name, a string "
     "(as the SDK's own override_by_name writes it)"),
    ("dashboard", "DynamicConfigValue", "value", None,
     "Grafana's `value?: _` is any value: a unit is a string, decimals a number"),
]


def schema(name: str) -> dict:
    doc = json.loads((SCHEMA_DIR / f"{name}.jsonschema.json").read_text())
    for file, definition, prop, allowed, _why in WIDENED:
        if file == name:
            spec = doc["definitions"][definition]["properties"][prop]
            spec.pop("additionalProperties", None)
            spec.pop("type")
            if allowed is not None:
                spec["type"] = allowed
    return doc


def validator(name: str, definition: str | None = None) -> jsonschema.Draft7Validator:
    doc = schema(name)
    if definition is not None:
        doc = {**doc, "$ref": f"#/definitions/{definition}"}
    jsonschema.Draft7Validator.check_schema(doc)
    return jsonschema.Draft7Validator(doc)


def schema_errors(d: dict) -> list[str]:
    """Every place `d` breaks the dashboard schema, a panel plugin's options or field
    config schema, or the Prometheus query schema."""
    def where(e: jsonschema.ValidationError) -> str:
        return f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
    errors = [where(e) for e in validator("dashboard").iter_errors(d)]
    query = validator("prometheus")
    for p in all_panels(d):
        if p["type"] == "row":
            continue
        plugin = schema(p["type"])["definitions"]
        errors += [f"{p['title']}: options {where(e)}"
                   for e in validator(p["type"], "Options").iter_errors(p.get("options", {}))]
        custom = p.get("fieldConfig", {}).get("defaults", {}).get("custom")
        if custom is not None:
            assert "FieldConfig" in plugin, p["type"]
            errors += [f"{p['title']}: custom {where(e)}"
                       for e in validator(p["type"], "FieldConfig").iter_errors(custom)]
        for t in p.get("targets", []):
            errors += [f"{p['title']}: target {t.get('refId')} {where(e)}"
                       for e in query.iter_errors(t)]
    return errors


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_dashboard_is_valid_against_grafanas_schema(path: Path) -> None:
    errors = schema_errors(json.loads(path.read_text()))
    assert not errors, "\n".join(errors)


def test_schema_rejects_what_grafana_would_not_read() -> None:
    """The validation has teeth: one wrong field anywhere is found and named."""
    d = json.loads((JSON_DIR / "overview.json").read_text())
    assert not schema_errors(d)
    stat, ts = d["panels"][0], d["panels"][6]
    assert (stat["type"], ts["type"]) == ("stat", "timeseries")
    cases = [
        (d, "refresh", 10),                                   # a string: "10s"
        (d["panels"][5], "collapsed", "no"),                  # a row's flag
        (stat["options"], "graphMode", "sparkline"),          # not a BigValueGraphMode
        (ts["options"]["legend"], "displayMode", "grid"),     # not a LegendDisplayMode
        (ts["fieldConfig"]["defaults"]["custom"], "drawStyle", "dots"),
        (ts["targets"][0], "format", "csv"),                  # not a PromQueryFormat
        (d["templating"]["list"][1], "refresh", 7),           # not a VariableRefresh
    ]
    for obj, key, bad in cases:
        good = obj[key]
        obj[key] = bad
        assert schema_errors(d), f"{key} = {bad!r} passed the schema"
        obj[key] = good
    assert not schema_errors(d)


def test_each_widening_of_the_schema_is_still_needed() -> None:
    """Once a newer vendored schema accepts Grafana's JSON there, drop the widening."""
    for file, definition, prop, _allowed, why in WIDENED:
        raw = json.loads((SCHEMA_DIR / f"{file}.jsonschema.json").read_text())
        spec = raw["definitions"][definition]["properties"][prop]
        assert spec.get("type") in ("number", "object"), f"{definition}.{prop}: {why}"


def test_sdk_schema_and_grafana_versions_agree() -> None:
    """The generator's SDK release, the vendored schema and the compose Grafana are
    one Grafana version (major.minor)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    grafana = re.fullmatch(r"grafana/grafana:(\d+\.\d+)\.\d+",
                           compose["services"]["grafana"]["image"])
    assert grafana, compose["services"]["grafana"]["image"]
    pin = re.search(r'"grafana-foundation-sdk==\d+!(\d+\.\d+)\.\d+"',
                    (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml pins grafana-foundation-sdk==EPOCH!X.Y.Z"
    readme = (SCHEMA_DIR / "README.md").read_text()
    assert pin.group(1) == grafana.group(1)
    assert f"v{grafana.group(1)}.x+cog" in readme and pin.group(0).strip('"') in readme
    assert (SCHEMA_DIR / "LICENSE").read_text().lstrip().startswith("Apache License")
