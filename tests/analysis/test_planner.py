"""analysis.planner: labelled conversations needed for a target width, and the ICC lever."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import planner, ppi, stats


def _estimates(est: ppi.CellEstimates) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "responder": ["r"],
            "attribute": ["Safety"],
            "n_labelled": est.n_labelled,
            "estimate": est.estimate,
            "se": est.se,
            "clinician_only_se": est.clinician_only_se,
        }
    )


def _population(rng, size, rho):
    truth = rng.normal(3.0, 1.0, size)
    judge = rho * truth + np.sqrt(1 - rho**2) * rng.normal(3.0, 1.0, size)
    return truth, judge


@pytest.mark.parametrize("rho", [0.0, 0.8])
def test_labelling_the_planned_number_reaches_the_target_width(rho):
    rng = np.random.default_rng(11)
    y, f = _population(rng, 200_000, rho)
    n0 = 200
    now = ppi.ppi_mean(y[:n0], f[:n0], f[n0:])
    plan = planner.planner_table(_estimates(now), target_half_width=0.05).iloc[0]
    assert plan.more_clinician_only == plan.needed_clinician_only - n0 > 0
    for column, use_judge in [("needed_clinician_only", False), ("needed_judge_assisted", True)]:
        n = int(plan[column])
        later = ppi.ppi_mean(y[:n], f[:n], f[n:])
        se = later.se[0] if use_judge else later.clinician_only_se[0]
        assert 1.96 * se == pytest.approx(0.05, rel=0.1)
    if rho:
        assert plan.needed_judge_assisted < 0.5 * plan.needed_clinician_only
        assert plan.ratings_saved > 0.5
    else:
        assert plan.needed_judge_assisted == pytest.approx(plan.needed_clinician_only, rel=0.02)


def test_a_cell_already_narrow_enough_needs_no_more():
    rng = np.random.default_rng(2)
    y, f = _population(rng, 5000, 0.5)
    now = ppi.ppi_mean(y[:3000], f[:3000], f[3000:])
    plan = planner.planner_table(_estimates(now), target_half_width=0.2).iloc[0]
    assert plan.more_clinician_only == 0 and plan.more_judge_assisted == 0


def test_bad_target_is_refused():
    with pytest.raises(ValueError, match="half-width"):
        planner.planner_table(pd.DataFrame(), target_half_width=0)


def test_separation_needs_half_width_below_the_difference():
    rng = np.random.default_rng(4)
    d = rng.normal(0.1, 1.0, 100)
    est = ppi.ppi_mean(d, d + rng.normal(0, 1, 100), rng.normal(0.1, 1.4, 900))
    frame = _estimates(est).rename(columns={"responder": "responder_a"})
    frame["responder_b"] = "s"
    plan = planner.separation_table(frame).iloc[0]
    assert plan.target_half_width == pytest.approx(abs(est.estimate[0]))
    sigma = est.clinician_only_se[0] * 10
    assert plan.needed_clinician_only == np.ceil(
        (ppi.z_value(0.05) * sigma / abs(est.estimate[0])) ** 2
    )


def _icc_data(rng, n_resp, n_conv, spread, noise):
    quality = rng.normal(3.0, spread, n_resp)
    human = quality[:, None] + rng.normal(0, noise, (n_resp, n_conv))
    judge = quality[:, None] + 0.3 + rng.normal(0, noise, (n_resp, n_conv))
    return human, judge


def test_icc_lever_says_more_conversations_will_not_settle_when_responders_dominate():
    rng = np.random.default_rng(0)
    human, judge = _icc_data(rng, 9, 1000, spread=0.5, noise=0.5)
    # Responder means differ by 0.5 while their standard error is 0.016: the interval comes
    # from having 9 responders, not from the conversations.
    human[:, :] += rng.normal(0, 0.3, (9, 1))
    lever = planner.icc_lever(human, judge, label="Safety for gpt-4o", n_boot=2000)
    assert lever.conversation_share < 0.2
    assert lever.width_more_responders < lever.width_more_conversations
    assert "will not settle" in lever.verdict and lever.verdict.startswith("Safety for gpt-4o")


def test_icc_lever_projects_narrower_intervals_for_both_levers_when_conversations_are_noisy():
    rng = np.random.default_rng(1)
    human, judge = _icc_data(rng, 9, 5, spread=0.5, noise=1.5)
    lever = planner.icc_lever(human, judge, n_boot=2000)
    assert lever.conversation_share > 0.3
    assert lever.width_more_conversations < lever.width_now
    assert lever.width_more_responders < lever.width_now
    assert f"about {lever.width_more_responders:.2f}" in lever.verdict


def test_a_conversation_difficulty_shared_by_all_responders_changes_nothing():
    # Conversations are crossed with responders: a hard conversation lowers every responder's
    # scores alike, a column shift ICC(C,1) ignores. Drawing conversation ids once per
    # replicate for every responder keeps it a column shift, so the lever is unchanged to
    # rounding, and so is the reliability report's two-stage bootstrap, which draws them the
    # same way (drawing them per responder would turn the shift into spread between them).
    rng = np.random.default_rng(3)
    human, judge = _icc_data(rng, 9, 40, spread=0.3, noise=0.8)
    hard = rng.normal(0, 1.5, 40)[None, :]
    plain = planner.icc_lever(human, judge, n_boot=500, seed=5)
    shifted = planner.icc_lever(human + hard, judge + hard, n_boot=500, seed=5)
    for field in ("width_now", "width_more_conversations", "width_more_responders",
                  "width_more_responders_low", "conversation_share"):  # fmt: skip
        assert getattr(shifted, field) == pytest.approx(getattr(plain, field), abs=1e-9)
    independent = [
        stats.bootstrap_icc_ci_two_stage(h, j, n_boot=500, seed=5)
        for h, j in [(human, judge), (human + hard, judge + hard)]
    ]
    widths = [ci.ci_high - ci.ci_low for ci in independent]
    assert widths[1] == pytest.approx(widths[0], abs=1e-9)


def test_the_responder_lever_is_a_range_and_absent_below_four_responders():
    rng = np.random.default_rng(4)
    human, judge = _icc_data(rng, 4, 200, spread=0.5, noise=1.0)
    four = planner.icc_lever(human, judge, n_boot=1000)
    assert four.width_more_responders_low < four.width_more_responders
    assert four.width_more_responders < four.width_more_responders_high
    assert "95 % range of the projection" in four.verdict
    three = planner.icc_lever(human[:3], judge[:3], n_boot=1000)
    assert np.isfinite(three.width_now) and np.isfinite(three.width_more_conversations)
    assert np.isnan(three.width_more_responders) and np.isnan(three.width_more_responders_high)
    assert "not projected from 3 responders" in three.verdict


def test_icc_lever_needs_three_responders():
    lever = planner.icc_lever(np.ones((2, 4)), np.ones((2, 4)))
    assert np.isnan(lever.width_now) and "fewer than three" in lever.verdict


def test_judge_assisted_interval_already_at_target_needs_no_more():
    # n = 4, clinician-only needs (z·σ/h)² = 4.5 (→ 5), the judge's width ratio² is 0.85, so
    # with judges 3.825 ≤ 4 conversations reach the target: none more. Rounding the
    # clinician-only count up before scaling (⌈5 · 0.85⌉ = 5) would ask for one more.
    z = ppi.z_value(0.05)
    se_c = 0.1 * np.sqrt(4.5) / z / np.sqrt(4)  # so that (z·se_c·√4 / 0.1)² = 4.5
    frame = pd.DataFrame(
        {"responder": ["r"], "attribute": ["Safety"], "n_labelled": [4], "estimate": [3.0],
         "se": [se_c * np.sqrt(0.85)], "clinician_only_se": [se_c]}
    )  # fmt: skip
    plan = planner.planner_table(frame, target_half_width=0.1).iloc[0]
    assert (plan.needed_clinician_only, plan.more_clinician_only) == (5, 1)
    assert (plan.needed_judge_assisted, plan.more_judge_assisted) == (4, 0)
    assert plan.half_width_judge_assisted < 0.1


def test_a_row_without_a_plan_says_why():
    """A cell with one clinician-rated response has no interval to plan from, and a difference
    measured as exactly 0 has no width that would separate it: each says so in words instead of
    showing blank counts."""
    nan = float("nan")
    frame = pd.DataFrame(
        {"responder": ["r", "s", "t"], "attribute": ["Safety"] * 3, "n_labelled": [40, 1, 1],
         "estimate": [3.0, 4.0, 4.0], "se": [0.1, nan, nan], "clinician_only_se": [0.12, nan, nan],
         "warning": ["", "not estimable: 1 clinician-rated response; an estimate and its "
                     "interval need at least 2", ""]}
    )  # fmt: skip
    plan = planner.planner_table(frame, target_half_width=0.1)
    assert plan.loc[0, "reason"] == "" and np.isfinite(plan.loc[0, "more_clinician_only"])
    assert plan.loc[1, "reason"] == frame.loc[1, "warning"]
    assert plan.loc[2, "reason"].startswith("not estimable: 1 clinician-rated response;")
    assert plan.loc[1:, "more_clinician_only"].isna().all()
    pair = (
        frame.iloc[:1]
        .rename(columns={"responder": "responder_a"})
        .assign(responder_b="s", estimate=0.0)
    )
    assert (
        planner.separation_table(pair)
        .loc[0, "reason"]
        .startswith("the difference measured so far is 0")
    )
