"""The forest plot's axis reaches every negative ICC or interval bound (pure, no database)."""

import pandas as pd
import pytest

from analysis.charts import forest, forest_domain

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
