"""The Grafana dashboards: committed JSON is the generator's output, and well formed.

No Grafana needed: structure only (ids, grid, datasource, queries, variables) and
the provisioning files that tie the JSON to the compose deployment. Whether the
queries return data is tests/test_prometheus.py's job.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from itertools import combinations
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "dashboards" / "generate.py"
JSON_DIR = ROOT / "dashboards" / "json"
PROVISIONING = ROOT / "dashboards" / "provisioning"
PANEL_TYPES = {"row", "timeseries", "stat", "table", "heatmap", "piechart", "bargauge"}
MACROS = {"$__rate_interval", "$__interval", "$__range"}
FILES = sorted(JSON_DIR.glob("*.json"))


def provisioned_uid() -> str:
    doc = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    [ds] = doc["datasources"]
    assert ds["type"] == "prometheus"
    assert ds["url"] == "http://prometheus:9090"     # the compose service
    return ds["uid"]


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
    uid = provisioned_uid()
    assert d["uid"].startswith("mbds-") and len(d["uid"]) <= 40
    assert d["schemaVersion"] == 39 and d["id"] is None and d["title"]

    panels = all_panels(d)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    assert all(isinstance(i, int) and i > 0 for i in ids)

    variables = {v["name"]: v for v in d["templating"]["list"]}
    for v in variables.values():
        assert v["datasource"]["uid"] == uid
        assert re.fullmatch(r"label_values\(\w+, *\w+\)", v["query"]["query"]), v["query"]
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
        assert p["datasource"]["uid"] == uid, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        for t in p["targets"]:
            assert t["datasource"]["uid"] == uid
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
