"""Vega-Lite forest plot of judge-assisted vs clinician-only intervals (pure, no Django)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from analysis.charts import NARROW, SCHEMA, chart_records, figure2_order

METHOD_COLOURS = {"clinician only": "#6b7280", "judge-assisted": "#1f5fa8"}


def forest_means(means: pd.DataFrame, attributes: Sequence[str]) -> dict[str, Any]:
    """Per responder × attribute: the clinician-only and the judge-assisted 95 % CI."""
    assisted = means.assign(method="judge-assisted")[
        ["responder", "attribute", "method", "estimate", "ci_low", "ci_high"]
    ]
    clinician = means.assign(method="clinician only").rename(
        columns={
            "clinician_only_estimate": "estimate_c",
            "clinician_only_ci_low": "ci_low_c",
            "clinician_only_ci_high": "ci_high_c",
        }
    )[["responder", "attribute", "method", "estimate_c", "ci_low_c", "ci_high_c"]]
    clinician.columns = assisted.columns
    values = chart_records(pd.concat([clinician, assisted]), list(assisted.columns))
    colour = {
        "field": "method",
        "type": "nominal",
        "title": None,
        "scale": {"domain": list(METHOD_COLOURS), "range": list(METHOD_COLOURS.values())},
        "legend": {"orient": "top"},
    }
    return _interval_facets(
        title="Clinician mean per responder: clinician-only vs judge-assisted 95% CI",
        values=values,
        attributes=attributes,
        y={"field": "responder", "type": "nominal", "title": None},
        offset={"field": "method", "type": "nominal"},
        colour=colour,
        tooltip=[
            {"field": "responder"},
            {"field": "attribute"},
            {"field": "method"},
            *ESTIMATE_TOOLTIP,
        ],
        width=200,
        step=9,
        point_size=25,
    )


SEPARATION_COLOURS = {
    "separated from next": "#1f5fa8",
    "not separated from next": "#d97706",
    "last place": "#6b7280",
    "no interval": "#d1d5db",
}


def ranking_chart(ranking: pd.DataFrame, attributes: Sequence[str]) -> dict[str, Any]:
    """Per attribute, responders in ranked order with their judge-assisted 95 % CI, coloured
    by whether the paired difference to the next place is statistically separated."""
    label = ranking["separated_from_next"].map(
        {True: "separated from next", False: "not separated from next"}
    )
    last = ranking["place"] == ranking.groupby("attribute")["place"].transform("max")
    label = label.where(label.notna(), np.where(last, "last place", "no interval"))
    values = chart_records(
        ranking.assign(separation=label),
        ["attribute", "place", "responder", "estimate", "ci_low", "ci_high", "separation"],
    )
    colour = {
        "field": "separation",
        "type": "nominal",
        "title": None,
        "scale": {"domain": list(SEPARATION_COLOURS), "range": list(SEPARATION_COLOURS.values())},
        "legend": {"orient": "top"},
    }
    return _interval_facets(
        title="Ranking by judge-assisted estimate (95% CI), coloured by separation",
        values=values,
        attributes=attributes,
        y={
            "field": "responder",
            "type": "nominal",
            "title": None,
            "sort": {"field": "place", "order": "ascending"},
        },
        colour=colour,
        tooltip=[
            {"field": "place"},
            {"field": "responder"},
            {"field": "attribute"},
            *ESTIMATE_TOOLTIP,
            {"field": "separation"},
        ],
        width=160,
        step=12,
        point_size=30,
        independent_y=True,
    )


ESTIMATE_TOOLTIP = [
    {"field": "estimate", "format": ".3f"},
    {"field": "ci_low", "format": ".3f"},
    {"field": "ci_high", "format": ".3f"},
]


def _interval_facets(
    *,
    title: str,
    values: list[dict[str, Any]],
    attributes: Sequence[str],
    y: dict[str, Any],
    colour: dict[str, Any],
    tooltip: list[dict[str, str]],
    width: int,
    step: int,
    point_size: int,
    offset: dict[str, Any] | None = None,
    independent_y: bool = False,
) -> dict[str, Any]:
    """One panel per attribute (Figure 2's order), each row an interval (a rule from ci_low to
    ci_high) with its estimate (a point): what both charts of this module draw."""
    position = {"y": y, **({"yOffset": offset} if offset else {})}
    chart: dict[str, Any] = {
        "$schema": SCHEMA,
        "title": title,
        "data": {"values": values},
        "facet": {
            "field": "attribute",
            "type": "nominal",
            "sort": figure2_order(attributes),
            "title": None,
        },
        "columns": 4,
        # One column on a phone (static/js/charts.js), its legend one entry a line.
        NARROW: {"spec": {"width": "fit"}, "config": {"legend": {"columns": 1}}},
    }
    if independent_y:
        chart["resolve"] = {"scale": {"y": "independent"}}
    chart["spec"] = {
        "width": width,
        "height": {"step": step},
        "layer": [
            {
                "mark": {"type": "rule", "strokeWidth": 2},
                "encoding": {
                    **position,
                    "x": {
                        "field": "ci_low",
                        "type": "quantitative",
                        "scale": {"zero": False},
                        "title": "clinician mean (1–5)",
                    },
                    "x2": {"field": "ci_high"},
                    "color": colour,
                },
            },
            {
                "mark": {"type": "point", "filled": True, "size": point_size},
                "encoding": {
                    **position,
                    "x": {"field": "estimate", "type": "quantitative"},
                    "color": colour,
                    "tooltip": tooltip,
                },
            },
        ],
    }
    return chart
