"""The forest plot's axis reaches every negative ICC or interval bound (pure, no database)."""

import pandas as pd
import pytest

from analysis.charts import NARROW, forest, forest_domain, heatmap, heatmap_domain, status_legend

pytestmark = pytest.mark.portable


def _frame(icc: list[float], low: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "judge": "j",
            "attribute": [f"a{i}" for i in range(len(icc))],
            "icc_c1": icc,
            "ci_low": low,
            "ci_high": [v + 0.2 for v in icc],
            "ci_width": 0.4,
            "status": "PR",
        }
    )


def test_axis_keeps_the_usual_range_when_everything_is_above_it():
    assert forest_domain(_frame([0.5, 0.8], [0.3, 0.6])) == [-0.2, 1.0]


def test_axis_reaches_the_lowest_bound_rounded_down():
    assert forest_domain(_frame([0.1, -0.3], [-0.05, -0.62])) == [-0.7, 1.0]


def test_axis_ignores_missing_values_and_stops_at_minus_one():
    assert forest_domain(_frame([float("nan")], [float("nan")])) == [-0.2, 1.0]
    assert forest_domain(_frame([-1.0], [-1.0])) == [-1.0, 1.0]


def test_forest_spec_uses_the_domain_and_clips():
    spec = forest(_frame([0.2], [-0.45]), ["a0"])
    rule, point = spec["spec"]["layer"]
    assert rule["encoding"]["x"]["scale"]["domain"] == [-0.5, 1.0]
    assert rule["mark"]["clip"] and point["mark"]["clip"]


def test_on_a_phone_the_forest_wraps_one_panel_per_judge_to_the_screen():
    two = pd.concat([_frame([0.5], [0.3]), _frame([0.6], [0.4]).assign(judge="k")])
    spec = forest(two, ["a0"])
    assert spec["facet"]["field"] == "judge" and spec["columns"] == 2  # side by side when wide
    assert spec[NARROW] == {"spec": {"width": "fit"}}  # static/js/charts.js fills "fit"


def test_on_a_phone_the_heatmap_puts_attributes_down_and_judges_across():
    spec = heatmap(_frame([0.5, 0.8], [0.3, 0.6]), ["a0", "a1"], field="icc_c1", title="ICC")
    assert spec["encoding"]["x"]["field"] == "attribute"
    narrow = spec[NARROW]["encoding"]
    assert narrow["x"]["field"] == "judge" and narrow["y"]["field"] == "attribute"
    assert narrow["y"]["sort"] == spec["encoding"]["x"]["sort"]


def test_the_status_legend_says_each_status_in_words_with_the_thresholds():
    legend = dict(status_legend())
    assert list(legend) == ["GR", "MR", "PR"]
    assert "good reliability" in legend["GR"] and "0.355" in legend["GR"]
    assert "moderate" in legend["MR"] and "0.56" in legend["MR"]
    assert "poor" in legend["PR"]


def _heatmap_color(spec: dict) -> tuple[list[float], str]:
    rect, text = spec["layer"]
    scale = rect["encoding"]["color"]["scale"]["domain"]
    return scale, text["encoding"]["color"]["condition"]["test"]


def test_heatmap_colours_span_the_data_where_it_leaves_zero_to_one():
    wide = _frame([0.5, -0.3], [0.3, -0.9]).assign(ci_width=[0.4, 2.0])
    domain, dark = _heatmap_color(heatmap(wide, ["a0", "a1"], field="ci_width", title="CI"))
    assert domain == [0.0, 2.0] and dark == "datum.ci_width > 1.2"
    domain, dark = _heatmap_color(heatmap(wide, ["a0", "a1"], field="icc_c1", title="ICC"))
    assert domain == [-0.3, 1.0] and dark == "datum.icc_c1 > 0.48"


def test_heatmap_keeps_the_papers_zero_to_one_scale_for_data_inside_it():
    usual = _frame([0.5, 0.8], [0.3, 0.6])
    assert _heatmap_color(heatmap(usual, ["a0", "a1"], field="icc_c1", title="ICC")) == (
        [0.0, 1.0],
        "datum.icc_c1 > 0.6",
    )
    assert heatmap_domain(pd.Series([float("nan"), float("inf")]), ci_width=True) == [0.0, 1.0]
