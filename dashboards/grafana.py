"""Typed builders for Grafana 11.2 dashboard JSON (schemaVersion 39): targets, panels,
variables, dashboards with stable ids and grid positions, and the PromQL helpers
the MBDS dashboards share. Plain Python, no third-party package; the dashboards
themselves are in generate.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DATASOURCE_UID = "mbds-prometheus"
DATASOURCE = {"type": "prometheus", "uid": DATASOURCE_UID}
SCHEMA_VERSION = 39            # Grafana 11.2
GRID_WIDTH = 24
OUT_DIR = Path(__file__).resolve().parent / "json"
PANEL_TYPES = ("row", "timeseries", "stat", "table", "heatmap", "piechart", "bargauge")
QUANTILES = (("p50", "0.5"), ("p95", "0.95"), ("p99", "0.99"))
RI = "$__rate_interval"
RECORDS_PER_S = "suffix: rec/s"

Json = dict[str, Any]


# --------------------------------------------------------------- builders --
@dataclass
class Target:
    expr: str
    legend: str = "__auto"
    instant: bool = False
    format: str = "time_series"          # or "table", "heatmap"

    def to_json(self, ref_id: str) -> Json:
        return {"datasource": DATASOURCE, "editorMode": "code", "expr": self.expr,
                "format": self.format, "instant": self.instant, "legendFormat": self.legend,
                "range": not self.instant, "refId": ref_id}


@dataclass
class Panel:
    title: str
    type: str
    targets: list[Target] = field(default_factory=list)
    w: int = 12
    h: int = 8
    unit: str = ""
    description: str = ""
    options: Json = field(default_factory=dict)
    defaults: Json = field(default_factory=dict)       # extra fieldConfig.defaults
    overrides: list[Json] = field(default_factory=list)
    transformations: list[Json] = field(default_factory=list)
    repeat: str = ""                                   # a row repeated per variable value

    def __post_init__(self) -> None:
        assert self.type in PANEL_TYPES, self.type
        assert 0 < self.w <= GRID_WIDTH


def row(title: str, repeat: str = "") -> Panel:
    return Panel(title, "row", w=GRID_WIDTH, h=1, repeat=repeat)


def _legend(calcs: list[str]) -> Json:
    return {"calcs": calcs, "displayMode": "table", "placement": "bottom", "showLegend": True}


def timeseries(title: str, *targets: Target, unit: str = "s", w: int = 12, h: int = 8,
               description: str = "", stack: bool = False) -> Panel:
    custom: Json = {"drawStyle": "line", "fillOpacity": 10 if not stack else 40,
                    "lineWidth": 1, "showPoints": "never", "spanNulls": True}
    if stack:
        custom["stacking"] = {"group": "A", "mode": "normal"}
    return Panel(title, "timeseries", list(targets), w=w, h=h, unit=unit,
                 description=description, defaults={"custom": custom},
                 options={"legend": _legend(["mean", "max", "lastNotNull"]),
                          "tooltip": {"mode": "multi", "sort": "desc"}})


def stat(title: str, target: Target, *, unit: str = "none", w: int = 6, h: int = 4,
         description: str = "", decimals: int | None = None) -> Panel:
    defaults: Json = {"color": {"mode": "thresholds"},
                      "thresholds": {"mode": "absolute",
                                     "steps": [{"color": "green", "value": None}]}}
    if decimals is not None:
        defaults["decimals"] = decimals
    return Panel(title, "stat", [target], w=w, h=h, unit=unit, description=description,
                 defaults=defaults,
                 options={"colorMode": "value", "graphMode": "area", "justifyMode": "auto",
                          "orientation": "auto", "textMode": "auto",
                          "reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                            "values": False}})


def heatmap(title: str, expr: str, *, w: int = 24, h: int = 9, description: str = "") -> Panel:
    """A Prometheus histogram's buckets over time (`expr` sums a _bucket rate by le)."""
    return Panel(title, "heatmap", [Target(expr, legend="{{le}}", format="heatmap")], w=w, h=h,
                 unit="s", description=description,
                 options={"calculate": False, "cellGap": 1,
                          "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64,
                                    "exponent": 0.5, "fill": "dark-orange", "reverse": False},
                          "filterValues": {"le": 1e-9}, "legend": {"show": True},
                          "rowsFrame": {"layout": "auto"},
                          "tooltip": {"mode": "single", "yHistogram": True},
                          "yAxis": {"axisPlacement": "left", "unit": "s"}})


def piechart(title: str, target: Target, *, w: int = 8, h: int = 8,
             description: str = "") -> Panel:
    return Panel(title, "piechart", [target], w=w, h=h, unit="none", description=description,
                 options={"displayLabels": ["percent"], "pieType": "pie",
                          "legend": {"displayMode": "table", "placement": "right",
                                     "showLegend": True, "values": ["value", "percent"]},
                          "reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                            "values": False},
                          "tooltip": {"mode": "single", "sort": "none"}})


def table(title: str, *targets: Target, rename: dict[str, str], columns: list[str],
          unit_by_column: dict[str, str], w: int = 24, h: int = 16,
          description: str = "", sort_by: str = "") -> Panel:
    """Instant table targets merged on their labels into one table."""
    order = {name: i for i, name in enumerate(columns)}
    overrides = [{"matcher": {"id": "byName", "options": col},
                  "properties": [{"id": "unit", "value": unit}, {"id": "decimals", "value": 3}]}
                 for col, unit in unit_by_column.items()]
    return Panel(title, "table", list(targets), w=w, h=h, description=description,
                 overrides=overrides,
                 options={"cellHeight": "sm", "showHeader": True,
                          "footer": {"show": False, "reducer": ["sum"], "fields": ""},
                          "sortBy": [{"displayName": sort_by, "desc": True}] if sort_by else []},
                 transformations=[
                     {"id": "merge", "options": {}},
                     {"id": "organize", "options": {"excludeByName": {"Time": True},
                                                    "indexByName": order,
                                                    "renameByName": rename}}])


@dataclass
class Variable:
    """A query variable over one label of one metric; `All` is the regex `.*`."""
    name: str
    label: str
    metric: str
    multi: bool = True

    def to_json(self) -> Json:
        query = f"label_values({self.metric}, {self.name})"
        return {"allValue": ".*", "current": {"selected": True, "text": ["All"],
                                              "value": ["$__all"]},
                "datasource": DATASOURCE, "definition": query, "hide": 0, "includeAll": True,
                "label": self.label, "multi": self.multi, "name": self.name, "options": [],
                "query": {"qryType": 1, "query": query,
                          "refId": "PrometheusVariableQueryEditor-VariableQuery"},
                "refresh": 2, "regex": "", "skipUrlSync": False, "sort": 1, "type": "query"}


@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    panels: list[Panel]
    variables: list[Variable] = field(default_factory=list)
    time_from: str = "now-15m"

    def layout(self) -> list[Json]:
        """Ids 1, 2, … in order; panels flow left to right and wrap at 24 columns."""
        out: list[Json] = []
        x = y = row_h = 0
        for pid, p in enumerate(self.panels, start=1):
            if p.type == "row" or x + p.w > GRID_WIDTH:
                x, y, row_h = 0, y + row_h, 0
            grid = {"h": p.h, "w": p.w, "x": x, "y": y}
            x, row_h = x + p.w, max(row_h, p.h)
            if p.type == "row":
                x, y, row_h = 0, y + p.h, 0
            out.append(self._panel(pid, p, grid))
        return out

    @staticmethod
    def _panel(pid: int, p: Panel, grid: Json) -> Json:
        if p.type == "row":
            j: Json = {"collapsed": False, "gridPos": grid, "id": pid, "panels": [],
                       "title": p.title, "type": "row"}
            if p.repeat:
                j["repeat"] = p.repeat
            return j
        refs = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        defaults: Json = {"unit": p.unit, **p.defaults} if p.unit else dict(p.defaults)
        j = {"datasource": DATASOURCE, "description": p.description,
             "fieldConfig": {"defaults": defaults, "overrides": p.overrides},
             "gridPos": grid, "id": pid, "options": p.options,
             "targets": [t.to_json(refs[i]) for i, t in enumerate(p.targets)],
             "title": p.title, "type": p.type}
        if p.transformations:
            j["transformations"] = p.transformations
        return j

    def to_json(self) -> Json:
        return {
            "annotations": {"list": []},
            "description": self.description,
            "editable": True,
            "fiscalYearStartMonth": 0,
            "graphTooltip": 1,
            "id": None,
            "links": [{"asDropdown": False, "icon": "external link", "includeVars": False,
                       "keepTime": True, "tags": ["mbds"], "targetBlank": False,
                       "title": "MBDS dashboards", "type": "dashboards"}],
            "panels": self.layout(),
            "refresh": "10s",
            "schemaVersion": SCHEMA_VERSION,
            "tags": ["mbds"],
            "templating": {"list": [v.to_json() for v in self.variables]},
            "time": {"from": self.time_from, "to": "now"},
            "timepicker": {},
            "timezone": "",
            "title": self.title,
            "uid": self.uid,
            "version": 1,
            "weekStart": "",
        }


# ------------------------------------------------------------- dashboards --
def selector(**labels: str) -> str:
    """A label selector; values starting with '$' become regex matches of the variable."""
    parts = [f'{k}=~"{v}"' if v.startswith("$") or "|" in v else f'{k}="{v}"'
             for k, v in labels.items()]
    return "{" + ", ".join(parts) + "}"


def quantiles(metric: str, by: str, sel: str, legend: str) -> list[Target]:
    return [Target(f"histogram_quantile({q}, sum by ({by}, le) "
                   f"(rate({metric}_bucket{sel}[{RI}])))", legend=f"{legend} {name}")
            for name, q in QUANTILES]


def mean(metric: str, by: str, sel: str, rng: str = RI) -> str:
    return (f"sum by ({by}) (rate({metric}_sum{sel}[{rng}])) / "
            f"sum by ({by}) (rate({metric}_count{sel}[{rng}]))")
