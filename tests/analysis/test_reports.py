"""analysis.reports on synthetic long DataFrames whose answers are known."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import reports, stats

ATTRS = ["Guidance", "Empathy"]
RESPONDERS = [f"m{i}" for i in range(9)]


def _rows(rater: str, kind: str, scores: dict[tuple[int, str, str], float]) -> list[dict]:
    return [
        {
            "conversation": conv,
            "responder": resp,
            "responder_family": resp.rstrip("0123456789") or resp,
            "rater": rater,
            "rater_kind": kind,
            "attribute": attr,
            "score": score,
        }
        for (conv, resp, attr), score in scores.items()
    ]


def _human_scores(
    rng: np.random.Generator, n_conv: int = 40, responders=RESPONDERS
) -> dict[tuple[int, str, str], float]:
    """Integer 1–5 scores with a clear quality ordering between responders."""
    quality = dict(zip(responders, np.linspace(2.0, 4.5, len(responders)), strict=True))
    return {
        (c, r, a): float(np.clip(np.round(quality[r] + rng.normal(0, 0.8)), 1, 5))
        for c in range(n_conv)
        for r in responders
        for a in ATTRS
    }


def _frame(*parts: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([row for part in parts for row in part])


@pytest.fixture
def offset_judge() -> tuple[pd.DataFrame, dict]:
    human = _human_scores(np.random.default_rng(0))
    judge = {key: v + 0.5 for key, v in human.items()}
    return _frame(_rows("dr_a", "clinician", human), _rows("j1", "judge", judge)), human


def _row(table: pd.DataFrame, judge: str, attribute: str) -> pd.Series:
    hit = table[(table["judge"] == judge) & (table["attribute"] == attribute)]
    assert len(hit) == 1
    return hit.iloc[0]


def test_judge_equal_to_human_plus_half(offset_judge) -> None:
    df, human = offset_judge
    table = reports.reliability_table(df, attributes=ATTRS, n_boot=300, seed=1)
    assert list(table["attribute"]) == ATTRS
    for attribute in ATTRS:
        row = _row(table, "j1", attribute)
        assert row["n_models"] == 9
        assert row["n_pairs"] == 9 * 40
        assert row["bias"] == pytest.approx(0.5)
        assert row["abs_bias_norm"] == pytest.approx(0.125)
        assert row["mse"] == pytest.approx(0.25)
        assert row["rmse"] == pytest.approx(0.5)
        assert row["mae"] == pytest.approx(0.5)
        assert row["alignment_factor"] == pytest.approx(0.5)
        assert row["icc_c1"] == pytest.approx(1.0)
        assert row["icc_a1"] < 1.0
        assert row["ci_low"] == pytest.approx(1.0) and row["ci_high"] == pytest.approx(1.0)
        assert row["status"] == "GR" and row["verdict"] == "suitable"
        expected_h = np.mean(
            [np.mean([human[(c, r, attribute)] for c in range(40)]) for r in RESPONDERS]
        )
        assert row["human_mean"] == pytest.approx(expected_h)
        assert row["judge_mean"] == pytest.approx(expected_h + 0.5)
        assert row["reason"] is None
    assert set(reports.RELIABILITY_COLUMNS) <= set(table.columns)


def test_reliability_matches_stats_on_responder_means() -> None:
    rng = np.random.default_rng(3)
    human = _human_scores(rng)
    judge = {k: float(np.clip(v + rng.choice([-1, 0, 0, 1]), 1, 5)) for k, v in human.items()}
    df = _frame(_rows("dr_a", "clinician", human), _rows("j1", "judge", judge))
    row = _row(reports.reliability_table(df, attributes=ATTRS, n_boot=200), "j1", "Empathy")
    means = np.array(
        [
            [
                np.mean([human[(c, r, "Empathy")] for c in range(40)]),
                np.mean([judge[(c, r, "Empathy")] for c in range(40)]),
            ]
            for r in RESPONDERS
        ]
    )
    ref = stats.icc(means)
    assert row["icc_c1"] == pytest.approx(ref.icc_c1, abs=1e-12)
    assert row["icc_a1"] == pytest.approx(ref.icc_a1, abs=1e-12)
    assert row["ms_error"] == pytest.approx(ref.mse)
    h = np.array([human[k] for k in human if k[2] == "Empathy"])
    j = np.array([judge[k] for k in human if k[2] == "Empathy"])
    assert row["mse"] == pytest.approx(np.mean((j - h) ** 2))
    assert row["ci_low"] <= row["icc_c1"] <= row["ci_high"]


def test_human_reference_is_mean_of_clinicians_per_cell() -> None:
    keys = [(c, r, "Guidance") for c in range(3) for r in RESPONDERS[:3]]
    a = dict.fromkeys(keys, 3.0)
    b = dict.fromkeys(keys, 5.0)
    judge = dict.fromkeys(keys, 4.0)
    df = _frame(
        _rows("dr_a", "clinician", a), _rows("dr_b", "clinician", b), _rows("j", "judge", judge)
    )
    row = _row(reports.reliability_table(df, attributes=["Guidance"], n_boot=50), "j", "Guidance")
    assert row["human_mean"] == pytest.approx(4.0)
    assert row["bias"] == pytest.approx(0.0)
    assert row["mse"] == pytest.approx(0.0)
    assert row["n_pairs"] == 9  # one pair per cell, not per clinician
    # All three responders identical → ICC undefined: NaN with a reason, not an exception.
    assert math.isnan(row["icc_c1"]) and row["reason"]
    assert row["verdict"] is None


def test_exclusions_remove_self_preference(offset_judge) -> None:
    df, human = offset_judge
    # The judge wildly over-rates its own family's responder m0.
    df = df.copy()
    own = (df["rater"] == "j1") & (df["responder"] == "m0")
    df.loc[own, "score"] = 5.0
    kept = reports.reliability_table(df, attributes=ATTRS, n_boot=100)
    dropped = reports.reliability_table(
        df, attributes=ATTRS, exclusions={"j1": {"m0"}, "other": {"m1"}}, n_boot=100
    )
    row = _row(dropped, "j1", "Guidance")
    assert row["n_models"] == 8 and row["n_pairs"] == 8 * 40
    assert row["bias"] == pytest.approx(0.5) and row["icc_c1"] == pytest.approx(1.0)
    assert _row(kept, "j1", "Guidance")["n_models"] == 9
    assert _row(kept, "j1", "Guidance")["icc_c1"] < 1.0


def test_missing_cells_only_paired_cells_count(offset_judge) -> None:
    df, human = offset_judge
    df = df.copy()
    # Judge skipped conversation 0 for m1; the human skipped conversation 1 for m2, where the
    # judge left an outlier that must be ignored; a NaN score row is ignored too.
    df = df[~((df["rater"] == "j1") & (df["conversation"] == 0) & (df["responder"] == "m1"))]
    df = df[~((df["rater"] == "dr_a") & (df["conversation"] == 1) & (df["responder"] == "m2"))]
    df.loc[
        (df["rater"] == "j1") & (df["conversation"] == 1) & (df["responder"] == "m2"), "score"
    ] = 1.0
    df.loc[
        (df["rater"] == "j1") & (df["conversation"] == 2) & (df["responder"] == "m3"), "score"
    ] = np.nan
    extra = _rows("j1", "judge", {(99, "m4", "Guidance"): 1.0})  # no human reference at all
    noise = _rows("j1", "judge", {(0, "m4", "Tone"): 1.0})  # attribute not requested
    df = pd.concat([df, _frame(extra, noise)], ignore_index=True)
    row = _row(reports.reliability_table(df, attributes=ATTRS, n_boot=100), "j1", "Guidance")
    assert row["n_pairs"] == 9 * 40 - 3
    assert row["bias"] == pytest.approx(0.5)
    assert row["mse"] == pytest.approx(0.25)
    assert row["icc_c1"] == pytest.approx(1.0)


def test_degenerate_judges_do_not_crash() -> None:
    human = {(c, "m0", "Guidance"): float(c % 5 + 1) for c in range(10)}
    df = _frame(_rows("dr", "clinician", human), _rows("j", "judge", human))
    row = _row(reports.reliability_table(df, attributes=["Guidance"], n_boot=50), "j", "Guidance")
    assert row["n_models"] == 1
    assert math.isnan(row["icc_c1"]) and "n=1" in row["reason"]
    assert row["mse"] == 0.0
    empty = reports.reliability_table(
        _frame(_rows("dr", "clinician", human)), attributes=["Guidance"]
    )
    assert empty.empty and "icc_c1" in empty.columns


def test_judge_without_any_paired_cell_for_an_attribute() -> None:
    human = _human_scores(np.random.default_rng(1), n_conv=5)
    judge = {k: v for k, v in human.items() if k[2] == "Guidance"}
    df = _frame(_rows("dr", "clinician", human), _rows("j", "judge", judge))
    table = reports.reliability_table(df, attributes=ATTRS, n_boot=50)
    empathy = _row(table, "j", "Empathy")
    assert empathy["n_models"] == 0 and empathy["n_pairs"] == 0
    assert math.isnan(empathy["icc_c1"]) and math.isnan(empathy["bias"]) and empathy["reason"]


def test_two_stage_option_labels_the_method(offset_judge) -> None:
    df, _ = offset_judge
    rng = np.random.default_rng(0)
    df = df.copy()
    judge_rows = df["rater"] == "j1"
    df.loc[judge_rows, "score"] += rng.normal(0, 0.7, judge_rows.sum())
    one = reports.reliability_table(df, attributes=ATTRS, n_boot=300)
    two = reports.reliability_table(df, attributes=ATTRS, n_boot=300, two_stage=True)
    assert set(one["ci_method"]) == {"responders"}
    assert set(two["ci_method"]) == {"two-stage"}
    np.testing.assert_allclose(one["icc_c1"], two["icc_c1"])
    assert (two["ci_low"] <= two["icc_c1"]).all() and (two["icc_c1"] <= two["ci_high"]).all()


def test_results_are_reproducible_and_independent_of_other_judges(offset_judge) -> None:
    df, human = offset_judge
    rng = np.random.default_rng(5)
    noisy = {k: float(np.clip(v + rng.normal(0, 1), 1, 5)) for k, v in human.items()}
    both = pd.concat([df, _frame(_rows("j2", "judge", noisy))], ignore_index=True)
    only = pd.concat(
        [df[df["rater"] == "dr_a"], _frame(_rows("j2", "judge", noisy))], ignore_index=True
    )
    a = _row(reports.reliability_table(both, attributes=ATTRS, seed=3), "j2", "Empathy")
    b = _row(reports.reliability_table(only, attributes=ATTRS, seed=3), "j2", "Empathy")
    assert (a["ci_low"], a["ci_high"]) == (b["ci_low"], b["ci_high"])


def test_human_means_table(offset_judge) -> None:
    df, human = offset_judge
    table = reports.human_means_table(df, ATTRS, groups={"Both": ATTRS})
    for r in RESPONDERS:
        for a in ATTRS:
            assert table.loc[r, a] == pytest.approx(np.mean([human[(c, r, a)] for c in range(40)]))
    np.testing.assert_allclose(table["Avg"], table[ATTRS].mean(axis=1))
    np.testing.assert_allclose(table["Both"], table["Avg"])
    assert list(table["Avg"]) == sorted(table["Avg"], reverse=True)


def test_ranking_table(offset_judge) -> None:
    df, _ = offset_judge
    table = reports.ranking_table(df, attributes=ATTRS, exclusions={"j1": {"m0"}})
    human = table[table["rater"] == reports.HUMAN_REFERENCE].set_index("responder")
    judge = table[table["rater"] == "j1"].set_index("responder")
    assert len(human) == 9 and len(judge) == 8 and "m0" not in judge.index
    expected = human["Guidance"].rank(ascending=False, method="average")
    np.testing.assert_allclose(human["rank_Guidance"], expected)
    np.testing.assert_allclose(human["mean_rank"], human[[f"rank_{a}" for a in ATTRS]].mean(axis=1))
    assert human["rank"].min() == 1.0
    # judge = human + 0.5 on every cell: same order, so identical ranks among kept responders.
    np.testing.assert_allclose(judge["Avg"], human.loc[judge.index, "Avg"] + 0.5)


def test_interrater_table_against_direct_statistics() -> None:
    rng = np.random.default_rng(9)
    keys = [(c, r, a) for c in range(30) for r in RESPONDERS[:3] for a in ATTRS]
    truth = {k: int(rng.integers(1, 6)) for k in keys}
    a = {k: float(v) for k, v in truth.items()}
    b = {k: float(np.clip(v + rng.integers(-1, 2), 1, 5)) for k, v in truth.items()}
    c = {k: float(v) for k, v in list(truth.items())[::2]}  # a third clinician on half
    df = _frame(_rows("a", "clinician", a), _rows("b", "clinician", b), _rows("c", "clinician", c))
    table = reports.interrater_table(df, attributes=ATTRS).set_index("attribute")
    guid = [k for k in keys if k[2] == "Guidance"]
    matrix = np.array([[a[k], b[k], c.get(k, np.nan)] for k in guid])
    row = table.loc["Guidance"]
    assert row["n_items"] == 90 and row["n_raters"] == 3
    ref_icc = stats.icc(matrix)
    assert row["icc_c1"] == pytest.approx(ref_icc.icc_c1) and row["n_complete"] == ref_icc.n
    assert row["alpha_interval"] == pytest.approx(
        stats.krippendorff_alpha(matrix, level="interval").value
    )
    sk_metrics = pytest.importorskip("sklearn.metrics")
    pairs = [(0, 1), (0, 2), (1, 2)]
    kappas = []
    for i, j in pairs:
        both = np.isfinite(matrix[:, i]) & np.isfinite(matrix[:, j])
        kappas.append(
            sk_metrics.cohen_kappa_score(
                matrix[both, i], matrix[both, j], weights="quadratic", labels=[1, 2, 3, 4, 5]
            )
        )
    assert row["kappa_quadratic"] == pytest.approx(np.mean(kappas), abs=1e-12)
    assert row["n_rater_pairs"] == 3


def test_interrater_table_single_clinician() -> None:
    df = _frame(_rows("a", "clinician", {(0, "m0", "Guidance"): 3.0}))
    row = reports.interrater_table(df, attributes=["Guidance"]).iloc[0]
    assert math.isnan(row["icc_c1"]) and "fewer than two" in row["reason"]


def test_calibration_table_recovers_affine_judge(offset_judge) -> None:
    df, human = offset_judge
    judge = {k: 2 * v - 1 for k, v in human.items()}  # human = 0.5 + 0.5 · judge
    df = _frame(_rows("dr_a", "clinician", human), _rows("j", "judge", judge))
    table = reports.calibration_table(df, attributes=ATTRS, exclusions={"j": {"m8"}})
    for _, row in table.iterrows():
        assert row["a"] == pytest.approx(0.5) and row["b"] == pytest.approx(0.5)
        assert row["mae_after"] == pytest.approx(0.0, abs=1e-12)
        assert row["mae_before"] > 0.5
        assert row["n_train"] + row["n_test"] == 8 * 40


def test_filter_scores(offset_judge) -> None:
    df, _ = offset_judge
    df = df.assign(condition=np.where(df["conversation"] % 2 == 0, "anxiety", "grief"))
    assert set(reports.filter_scores(df, condition="grief")["conversation"] % 2) == {1}
    assert len(reports.filter_scores(df, condition=["grief", "anxiety"], source=None)) == len(df)


def test_reliability_table_handles_paper_sized_input() -> None:
    # 4 judges × 1,000 conversations × 10 responders × 7 attributes + one clinician per cell
    # = 350k rows with 1,000 bootstrap resamples. How fast is measured, not asserted, by
    # benchmarks/report_bench.py (docs/benchmarks.md): a time bound fails on a busy machine.
    rng = np.random.default_rng(0)
    n_conv, resp = 1000, [f"r{i}" for i in range(10)]
    attrs = list(stats.ATTRIBUTES)
    base = pd.DataFrame(
        {
            "conversation": np.repeat(np.arange(n_conv), len(resp) * len(attrs)),
            "responder": np.tile(np.repeat(resp, len(attrs)), n_conv),
            "attribute": np.tile(attrs, n_conv * len(resp)),
        }
    )
    truth = rng.normal(4, 0.6, len(base))
    frames = [base.assign(rater="dr", rater_kind="clinician", score=np.round(truth))]
    for j in ("j1", "j2", "j3", "j4"):
        score = np.clip(np.round(truth + 0.3 + rng.normal(0, 0.7, len(base))), 1, 5)
        frames.append(base.assign(rater=j, rater_kind="judge", score=score))
    df = pd.concat(frames, ignore_index=True).assign(responder_family="f")
    assert len(df) == 350_000
    table = reports.reliability_table(df, exclusions={"j1": {"r0"}}, n_boot=1000)
    assert len(table) == 28 and table["n_models"].tolist()[:7] == [9] * 7
