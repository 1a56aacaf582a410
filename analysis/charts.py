"""Vega-Lite specifications for the dashboard, built from report tables (pure, no Django).

Each function takes a DataFrame from analysis.reports and returns a JSON-ready dict; the page
renders them with vega-embed served from static/vendor. Data are inlined (a few hundred rows).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from analysis import stats

SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"  # an identifier, never fetched
#: Paper Figure 2: cognitive → affective → safety/relevance, to expose the domain split.
FIGURE2_ORDER = (
    "Guidance",
    "Informativeness",
    "Empathy",
    "Helpfulness",
    "Understanding",
    "Relevance",
    "Safety",
)


def figure2_order(attributes: Sequence[str]) -> list[str]:
    """The attributes in the paper's Figure 2 order, any others after them as given."""
    known = [a for a in FIGURE2_ORDER if a in attributes]
    return known + [a for a in attributes if a not in known]


def chart_records(df: pd.DataFrame, columns: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of ``df`` (only ``columns``) as a Vega-Lite ``data.values`` list: NaN and
    infinities become None (JSON null), because JSON has no NaN."""
    out = []
    for row in df[list(columns)].to_dict("records"):
        out.append(
            {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in row.items()
            }
        )
    return out


# A chart's narrow layout: what static/js/charts.js merges into the spec (objects key by key,
# anything else replaced) where its container is narrower than a laptop's half screen.
NARROW = "narrow"


def _base(title: str, values: list[dict[str, Any]]) -> dict[str, Any]:
    return {"$schema": SCHEMA, "title": title, "data": {"values": values}, "width": "container"}


def heatmap_domain(values: pd.Series, *, ci_width: bool) -> list[float]:
    """The colour scale's ends: [0, 1] as in the paper's Figure 2, stretched to the data where it
    falls outside (an ICC below 0, a CI wider than 1 with few conversations), so that a cell
    beyond [0, 1] is not drawn in the same colour as one at 0 or 1."""
    finite = pd.to_numeric(values, errors="coerce").replace([math.inf, -math.inf], math.nan)
    finite = finite.dropna()
    if finite.empty:
        return [0.0, 1.0]
    if ci_width:
        return [0.0, max(1.0, float(finite.max()))]
    return [min(0.0, float(finite.min())), 1.0]


def heatmap(
    reliability: pd.DataFrame, attributes: Sequence[str], *, field: str, title: str
) -> dict[str, Any]:
    """Judge × attribute heatmap of ICC(C,1) or CI width (paper Figure 2, left/right)."""
    order = figure2_order(attributes)
    width = field == "ci_width"
    domain = heatmap_domain(reliability[field], ci_width=width)
    color: dict[str, Any] = {
        "field": field,
        "type": "quantitative",
        "title": "CI width" if width else "ICC(C,1)",
        "scale": {"domain": domain, "scheme": "orangered" if width else "blues"},
    }
    # White numbers on the darker part of the scale, wherever the domain ends.
    dark = domain[0] + 0.6 * (domain[1] - domain[0])
    label = {"field": field, "type": "quantitative", "format": ".2f"}
    attribute_axis = {"field": "attribute", "type": "nominal", "sort": order, "title": None}
    judge_axis = {"field": "judge", "type": "nominal", "title": None}
    return _base(title, chart_records(reliability, ["judge", "attribute", field, "status"])) | {
        "height": {"step": 36},
        "encoding": {"x": attribute_axis, "y": judge_axis},
        # On a phone, attributes down and judges across: a column per judge leaves each number
        # room to be read, where seven attribute columns would overlap them.
        NARROW: {"height": {"step": 30}, "encoding": {"x": judge_axis, "y": attribute_axis}},
        "layer": [
            {
                "mark": "rect",
                "encoding": {
                    "color": color,
                    "tooltip": [
                        {"field": "judge"},
                        {"field": "attribute"},
                        label,
                        {"field": "status"},
                    ],
                },
            },
            {
                "mark": {"type": "text", "fontSize": 12},
                "encoding": {
                    "text": label,
                    "color": {
                        "condition": {"test": f"datum.{field} > {dark:.4g}", "value": "white"},
                        "value": "black",
                    },
                },
            },
        ],
    }


def forest_domain(reliability: pd.DataFrame) -> list[float]:
    """The ICC axis: −0.2…1 unless an estimate or interval reaches lower, then down to it
    (rounded down to a tenth), so no point or interval is drawn outside the axis over the labels.
    """
    columns = [c for c in ("icc_c1", "ci_low") if c in reliability]
    lowest = reliability[columns].min().min() if columns and len(reliability) else float("nan")
    low = -0.2 if not math.isfinite(lowest) else min(-0.2, math.floor(lowest * 10) / 10)
    return [max(low, -1.0), 1.0]


def forest(reliability: pd.DataFrame, attributes: Sequence[str]) -> dict[str, Any]:
    """ICC(C,1) point and 95 % bootstrap CI per judge × attribute, GR/MR/PR as colour."""
    order = figure2_order(attributes)
    values = chart_records(
        reliability, ["judge", "attribute", "icc_c1", "ci_low", "ci_high", "ci_width", "status"]
    )
    y = {"field": "attribute", "type": "nominal", "sort": order, "title": None}
    domain = forest_domain(reliability)
    spec = _base("ICC(C,1) with 95% bootstrap CI", values)
    del spec["width"]  # a faceted chart sizes each panel instead
    judges = int(reliability["judge"].nunique()) if "judge" in reliability else 1
    return spec | {
        # A panel per judge, side by side; static/js/charts.js wraps them into fewer columns
        # where the screen has no room, and on a phone stretches the single column to fit.
        "facet": {"field": "judge", "type": "nominal", "title": None},
        "columns": max(judges, 1),
        NARROW: {"spec": {"width": "fit"}},
        "spec": {
            "width": 260,
            "height": {"step": 26},
            "layer": [
                {
                    "mark": {"type": "rule", "strokeWidth": 2, "clip": True},
                    "encoding": {
                        "y": y,
                        "x": {
                            "field": "ci_low",
                            "type": "quantitative",
                            "scale": {"domain": domain, "nice": False},
                            "title": "ICC(C,1)",
                        },
                        "x2": {"field": "ci_high"},
                        "color": {
                            "field": "status",
                            "type": "nominal",
                            "scale": {
                                "domain": ["GR", "MR", "PR"],
                                "range": ["#2e7d4f", "#a15c00", "#b3261e"],
                            },
                        },  # fmt: skip
                    },
                },
                {
                    "mark": {
                        "type": "point",
                        "filled": True,
                        "size": 60,
                        "color": "#1d2430",
                        "clip": True,
                    },
                    "encoding": {
                        "y": y,
                        "x": {"field": "icc_c1", "type": "quantitative"},
                        "tooltip": [
                            {"field": "attribute"},
                            {"field": "icc_c1", "format": ".3f", "title": "ICC(C,1)"},
                            {"field": "ci_low", "format": ".3f"},
                            {"field": "ci_high", "format": ".3f"},
                            {"field": "status"},
                        ],
                    },
                },
            ],
        },
    }


def bias_bars(reliability: pd.DataFrame, attributes: Sequence[str]) -> dict[str, Any]:
    """Signed bias (judge − human, on responder means) per attribute, a bar per judge."""
    values = chart_records(reliability, ["judge", "attribute", "bias", "human_mean", "judge_mean"])
    return _base("Bias: judge mean − human mean (1–5 scale)", values) | {
        "mark": "bar",
        "height": 220,
        "encoding": {
            "x": {"field": "attribute", "type": "nominal", "sort": list(attributes), "title": None},
            "xOffset": {"field": "judge"},
            "y": {"field": "bias", "type": "quantitative", "title": "bias"},
            "color": {"field": "judge", "type": "nominal"},
            "tooltip": [
                {"field": "judge"},
                {"field": "attribute"},
                {"field": "bias", "format": ".3f"},
                {"field": "human_mean", "format": ".3f"},
                {"field": "judge_mean", "format": ".3f"},
            ],
        },
    }


def human_vs_judges(ranking: pd.DataFrame) -> dict[str, Any]:
    """Paper Figure 4: per responder, the mean over attributes from the human reference and
    from each judge, responders sorted by the human mean."""
    human = ranking[ranking["rater"] == "human"].sort_values("Avg", ascending=False)
    values = chart_records(ranking, ["rater", "responder", "Avg"])
    return _base("Human reference vs each judge, per responder (mean of 7 attributes)", values) | {
        "mark": "bar",
        "height": 240,
        "encoding": {
            "x": {
                "field": "responder",
                "type": "nominal",
                "sort": human["responder"].tolist(),
                "title": None,
            },
            "xOffset": {"field": "rater"},
            "y": {
                "field": "Avg",
                "type": "quantitative",
                "scale": {"domain": [1, 5]},
                "title": "mean score",
            },
            "y2": {"datum": 1},  # bars rise from the bottom of the 1–5 scale, not from 0
            "color": {"field": "rater", "type": "nominal", "title": "rater"},
            "tooltip": [
                {"field": "rater"},
                {"field": "responder"},
                {"field": "Avg", "format": ".2f"},
            ],
        },
    }


def status_thresholds() -> str:
    return (
        f"GR: width ≤ {stats.STATUS_GOOD_MAX_WIDTH}, MR: ≤ {stats.STATUS_MODERATE_MAX_WIDTH}, "
        "PR: wider"
    )


def status_legend() -> list[tuple[str, str]]:
    """What GR, MR and PR mean, in words, for the legend beside every place they are shown."""
    return [
        (
            "GR",
            "good reliability: the 95% interval of ICC(C,1) is at most "
            f"{stats.STATUS_GOOD_MAX_WIDTH} wide",
        ),
        (
            "MR",
            f"moderate reliability: the interval is at most {stats.STATUS_MODERATE_MAX_WIDTH} wide",
        ),
        ("PR", "poor reliability: the interval is wider (too few responders, or noisy scores)"),
    ]


def max_repetition_bars(repetition: pd.DataFrame) -> dict[str, Any]:
    """Distortion runs: share of items whose most repeated label appears in r of N runs,
    one bar group per configuration ([CD] Figure 2)."""
    values = chart_records(repetition, ["configuration", "max_repetition", "proportion", "items"])
    spec = _base("Maximum repetition of any label across runs (Figure 2)", values)
    spec.update(
        {
            "height": 220,
            "mark": {"type": "bar", "tooltip": True},
            "encoding": {
                "x": {"field": "max_repetition", "type": "ordinal", "title": "max repetition r"},
                "xOffset": {"field": "configuration"},
                "y": {
                    "field": "proportion",
                    "type": "quantitative",
                    "title": "share of items",
                    "axis": {"format": "%"},
                },
                "color": {"field": "configuration", "type": "nominal"},
            },
        }
    )
    return spec
