"""The panels, variables and PromQL helpers the MBDS dashboards share, on Grafana's
foundation SDK (grafana-foundation-sdk, the release generated for Grafana 11.2,
the version docker-compose.yml runs). The dashboards themselves are in generate.py.

Every query goes to the data source picked by the dashboard's `datasource` variable
(type prometheus), so the JSON imports into any Grafana; its default is the
provisioned Prometheus (dashboards/provisioning/datasources/prometheus.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap as hb
from grafana_foundation_sdk.builders import piechart as pb
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.builders import stat as sb
from grafana_foundation_sdk.builders import table as tb
from grafana_foundation_sdk.builders import timeseries as tsb
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import heatmap as hm
from grafana_foundation_sdk.models import piechart as pcm
from grafana_foundation_sdk.models import prometheus as pm

DATASOURCE_VAR = "datasource"
# The provisioned Prometheus: the datasource variable's default.
PROVISIONED_UID, PROVISIONED_NAME = "mbds-prometheus", "Prometheus"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VAR}}}")
GRID_WIDTH = 24
OUT_DIR = Path(__file__).resolve().parent / "json"
QUANTILES = (("p50", "0.5"), ("p95", "0.95"), ("p99", "0.99"))
RI = "$__rate_interval"
RECORDS_PER_S = "suffix: rec/s"
REF_IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

PanelBuilder = Builder[dm.Panel]


# --------------------------------------------------------------- targets --
@dataclass
class Target:
    expr: str
    legend: str = "__auto"
    instant: bool = False
    format: str = "time_series"          # or "table", "heatmap"

    def build(self, ref_id: str) -> prom.Dataquery:
        q = (prom.Dataquery().expr(self.expr).legend_format(self.legend).ref_id(ref_id)
             .datasource(DATASOURCE).editor_mode(pm.QueryEditorMode.CODE)
             .format(pm.PromQueryFormat(self.format)))
        return q.instant() if self.instant else q.range()


def _with_targets(panel: Any, targets: tuple[Target, ...] | list[Target]) -> Any:
    for i, t in enumerate(targets):
        panel = panel.with_target(t.build(REF_IDS[i]))
    return panel.datasource(DATASOURCE)


# ---------------------------------------------------------------- panels --
def row(title: str, repeat: str = "") -> db.Row:
    r = db.Row(title).collapsed(False)
    return r.repeat(repeat) if repeat else r


def _legend(calcs: list[str], placement: cm.LegendPlacement) -> cb.VizLegendOptions:
    return (cb.VizLegendOptions().calcs(calcs).display_mode(cm.LegendDisplayMode.TABLE)
            .placement(placement).show_legend(True))


def timeseries(title: str, *targets: Target, unit: str = "s", w: int = 12, h: int = 8,
               description: str = "", stack: bool = False) -> tsb.Panel:
    p = (tsb.Panel().title(title).description(description).span(w).height(h).unit(unit)
         .draw_style(cm.GraphDrawStyle.LINE).fill_opacity(40 if stack else 10).line_width(1)
         .show_points(cm.VisibilityMode.NEVER).span_nulls(True)
         .legend(_legend(["mean", "max", "lastNotNull"], cm.LegendPlacement.BOTTOM))
         .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI)
                  .sort(cm.SortOrder.DESCENDING)))
    if stack:
        p = p.stacking(cb.StackingConfig().group("A").mode(cm.StackingMode.NORMAL))
    return _with_targets(p, targets)


def _reduce_last() -> cb.ReduceDataOptions:
    return cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)


def stat(title: str, target: Target, *, unit: str = "none", w: int = 6, h: int = 4,
         description: str = "", decimals: int | None = None,
         red_from: float | None = None) -> sb.Panel:
    """A single value, green; red from `red_from` on, if given."""
    steps = [dm.Threshold(value=None, color="green")]
    if red_from is not None:
        steps.append(dm.Threshold(value=red_from, color="red"))
    p = (sb.Panel().title(title).description(description).span(w).height(h).unit(unit)
         .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
         .thresholds(db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(steps))
         .color_mode(cm.BigValueColorMode.VALUE).graph_mode(cm.BigValueGraphMode.AREA)
         .justify_mode(cm.BigValueJustifyMode.AUTO).orientation(cm.VizOrientation.AUTO)
         .text_mode(cm.BigValueTextMode.AUTO).reduce_options(_reduce_last()))
    if decimals is not None:
        p = p.decimals(decimals)
    return _with_targets(p, [target])


def heatmap(title: str, expr: str, *, w: int = 24, h: int = 9,
            description: str = "") -> hb.Panel:
    """A Prometheus histogram's buckets over time (`expr` sums a _bucket rate by le)."""
    p = (hb.Panel().title(title).description(description).span(w).height(h).unit("s")
         .calculate(False).cell_gap(1)
         .color(hb.HeatmapColorOptions().mode(hm.HeatmapColorMode.SCHEME).scheme("Oranges")
                .steps(64).exponent(0.5).fill("dark-orange").reverse(False))
         .filter_values(hb.FilterValueRange().le(1e-9)).show_legend()
         .rows_frame(hb.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.AUTO))
         .mode(cm.TooltipDisplayMode.SINGLE).show_y_histogram()
         .y_axis(hb.YAxisConfig().axis_placement(cm.AxisPlacement.LEFT).unit("s")))
    return _with_targets(p, [Target(expr, legend="{{le}}", format="heatmap")])


def piechart(title: str, target: Target, *, w: int = 8, h: int = 8,
             description: str = "") -> pb.Panel:
    p = (pb.Panel().title(title).description(description).span(w).height(h).unit("none")
         .display_labels([pcm.PieChartLabels.PERCENT]).pie_type(pcm.PieChartType.PIE)
         .legend(pb.PieChartLegendOptions().display_mode(cm.LegendDisplayMode.TABLE)
                 .placement(cm.LegendPlacement.RIGHT).show_legend(True)
                 .values([pcm.PieChartLegendValues.VALUE, pcm.PieChartLegendValues.PERCENT]))
         .reduce_options(_reduce_last())
         .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.SINGLE)
                  .sort(cm.SortOrder.NONE)))
    return _with_targets(p, [target])


def table(title: str, *targets: Target, rename: dict[str, str], columns: list[str],
          unit_by_column: dict[str, str], w: int = 24, h: int = 16,
          description: str = "", sort_by: str = "") -> tb.Panel:
    """Instant table targets merged on their labels into one table."""
    p = (tb.Panel().title(title).description(description).span(w).height(h)
         .cell_height(cm.TableCellHeight.SM).show_header(True)
         .footer(cb.TableFooterOptions().show(False).reducer(["sum"]))
         .sort_by([cb.TableSortByFieldState().display_name(sort_by).desc(True)]
                  if sort_by else [])
         .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
         .with_transformation(dm.DataTransformerConfig(id_val="organize", options={
             "excludeByName": {"Time": True},
             "indexByName": {name: i for i, name in enumerate(columns)},
             "renameByName": rename})))
    for col, unit in unit_by_column.items():
        p = p.override_by_name(col, [dm.DynamicConfigValue(id_val="unit", value=unit),
                                     dm.DynamicConfigValue(id_val="decimals", value=3)])
    return _with_targets(p, targets)


# ------------------------------------------------------------- variables --
def datasource_variable() -> db.DatasourceVariable:
    """Which Prometheus every query goes to; the provisioned one unless the user picks."""
    return (db.DatasourceVariable(DATASOURCE_VAR).label("Data source").type("prometheus")
            .current(dm.VariableOption(selected=True, text=PROVISIONED_NAME,
                                       value=PROVISIONED_UID)))


@dataclass
class Variable:
    """A query variable over one label of one metric; `All` is the regex `.*`."""
    name: str
    label: str
    metric: str
    multi: bool = True

    def build(self) -> db.QueryVariable:
        return (db.QueryVariable(self.name).label(self.label).datasource(DATASOURCE)
                .query(f"label_values({self.metric}, {self.name})")
                .current(dm.VariableOption(selected=True, text=["All"], value=["$__all"]))
                .include_all(True).all_value(".*").multi(self.multi).regex("")
                .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
                .sort(dm.VariableSort.ALPHABETICAL_ASC))


# ------------------------------------------------------------- dashboard --
@dataclass
class Dashboard:
    uid: str
    title: str
    description: str
    panels: list[PanelBuilder | db.Row]
    variables: list[Variable] = field(default_factory=list)
    time_from: str = "now-15m"

    def build(self) -> dm.Dashboard:
        d = (db.Dashboard(self.title).uid(self.uid).description(self.description)
             .tags(["mbds"]).editable().tooltip(dm.DashboardCursorSync.CROSSHAIR)
             .refresh("10s").time(self.time_from, "now").timezone("").week_start("")
             .fiscal_year_start_month(0).version(1)
             .link(db.DashboardLink("MBDS dashboards").type(dm.DashboardLinkType.DASHBOARDS)
                   .tags(["mbds"]).as_dropdown(False).include_vars(False).keep_time(True)
                   .target_blank(False).icon("external link"))
             .with_variable(datasource_variable()))
        for v in self.variables:
            d = d.with_variable(v.build())
        for p in self.panels:
            if isinstance(p, db.Row):
                d = d.with_row(p)
            else:
                assert 0 < p.build().grid_pos.w <= GRID_WIDTH
                d = d.with_panel(p)
        out = d.build()
        # Stable ids 1, 2, … in order (the SDK leaves them to Grafana).
        for pid, panel in enumerate(out.panels or [], start=1):
            panel.id_val = pid
        return out


# ---------------------------------------------------------------- PromQL --
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
