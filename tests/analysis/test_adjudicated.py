"""Each judge against the adjudicated consensus (analysis.adjudicated), checked against
pingouin's ICC on a small table built by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from analysis.adjudicated import judges_against_final

pingouin = pytest.importorskip("pingouin")

# Five responders, two conversations; the final scores and one judge's scores, Empathy only.
FINAL = {
    ("c0", "m1"): 4.0,
    ("c1", "m1"): 5.0,
    ("c0", "m2"): 2.0,
    ("c1", "m2"): 3.0,
    ("c0", "m3"): 3.5,  # a clinician consensus (mean of 3 and 4)
    ("c1", "m3"): 3.0,
    ("c0", "m4"): 1.0,
    ("c1", "m4"): 2.0,
    ("c0", "m5"): 5.0,
    ("c1", "m5"): None,  # awaiting adjudication: left out
}
JUDGE = {
    ("c0", "m1"): 5,
    ("c1", "m1"): 4,
    ("c0", "m2"): 3,
    ("c1", "m2"): 3,
    ("c0", "m3"): 3,
    ("c1", "m3"): 4,
    ("c0", "m4"): 2,
    ("c1", "m4"): 2,
    ("c0", "m5"): 4,
    ("c1", "m5"): 1,
}


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    final = pd.DataFrame(
        [(c, r, "Empathy", s) for (c, r), s in FINAL.items()],
        columns=["conversation", "responder", "attribute", "final_score"],
    )
    judges = pd.DataFrame(
        [("judge-x", c, r, "Empathy", s) for (c, r), s in JUDGE.items()],
        columns=["judge", "conversation", "responder", "attribute", "score"],
    )
    return final, judges


def _pingouin(final_means: dict[str, float], judge_means: dict[str, float]) -> tuple[float, float]:
    rows = [(m, "final", v) for m, v in final_means.items()] + [
        (m, "judge", v) for m, v in judge_means.items()
    ]
    table = pingouin.intraclass_corr(
        pd.DataFrame(rows, columns=["target", "rater", "score"]),
        targets="target",
        raters="rater",
        ratings="score",
    ).set_index("Type")["ICC"]
    c1 = table.get("ICC(C,1)", table.get("ICC3"))
    a1 = table.get("ICC(A,1)", table.get("ICC2"))
    return float(c1), float(a1)


def test_the_icc_is_pingouins_on_responder_means_of_the_cells_both_scored():
    final, judges = _frames()
    table = judges_against_final(final, judges, attributes=["Empathy"])
    (row,) = table.to_dict("records")
    # By hand: responder means over the cells with a final score (m5's c1 is awaiting).
    final_means = {"m1": 4.5, "m2": 2.5, "m3": 3.25, "m4": 1.5, "m5": 5.0}
    judge_means = {"m1": 4.5, "m2": 3.0, "m3": 3.5, "m4": 2.0, "m5": 4.0}
    c1, a1 = _pingouin(final_means, judge_means)
    assert row["judge"] == "judge-x" and row["attribute"] == "Empathy"
    assert (row["n_models"], row["n_pairs"]) == (5, 9)
    assert row["icc_c1"] == pytest.approx(c1, abs=1e-12)
    assert row["icc_a1"] == pytest.approx(a1, abs=1e-12)
    assert row["reason"] is None


def test_excluded_responders_and_too_few_models():
    final, judges = _frames()
    table = judges_against_final(
        final,
        judges,
        attributes=["Empathy", "Safety"],
        exclusions={"judge-x": {"m1", "m2", "m3", "m4"}},
    )
    empathy, safety = table.to_dict("records")
    assert empathy["n_models"] == 1 and math.isnan(empathy["icc_c1"]) and empathy["reason"]
    assert safety["n_pairs"] == 0 and math.isnan(safety["icc_c1"])


def test_missing_columns_are_a_programming_error():
    final, judges = _frames()
    with pytest.raises(ValueError, match="final_score"):
        judges_against_final(final.drop(columns="final_score"), judges, attributes=["Empathy"])
