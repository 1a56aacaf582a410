"""analysis.stats against independent implementations (pingouin, sklearn, scipy, statsmodels,
krippendorff, hand-written formulas) and on degenerate input."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import stats

pingouin = pytest.importorskip("pingouin")
sk_metrics = pytest.importorskip("sklearn.metrics")


def _ratings(rng: np.random.Generator, n: int, k: int, *, spread: float = 1.0) -> np.ndarray:
    """Targets with a true effect, raters with a bias, plus noise — a realistic ICC input."""
    return (
        rng.normal(size=(n, 1)) * spread
        + rng.normal(scale=0.5, size=(1, k))
        + rng.normal(scale=0.6, size=(n, k))
    )


def _pingouin_iccs(y: np.ndarray) -> tuple[float, float]:
    n, k = y.shape
    long = pd.DataFrame(
        {
            "target": np.repeat(np.arange(n), k),
            "rater": np.tile(np.arange(k), n),
            "score": y.ravel(),
        }
    )
    table = pingouin.intraclass_corr(long, targets="target", raters="rater", ratings="score")
    by_type = table.set_index("Type")["ICC"]
    # pingouin ≥ 0.6 labels them ICC(A,1)/ICC(C,1); older versions ICC2/ICC3.
    a1 = by_type.get("ICC(A,1)", by_type.get("ICC2"))
    c1 = by_type.get("ICC(C,1)", by_type.get("ICC3"))
    return float(c1), float(a1)


def _listing1_icc(y: np.ndarray) -> tuple[float, float, float, float, float]:
    """The paper's Listing 1 (Appendix H), transcribed as the reference formula."""
    n, k = y.shape
    grand = y.mean()
    ss_rows = k * np.sum((y.mean(axis=1) - grand) ** 2)
    ss_cols = n * np.sum((y.mean(axis=0) - grand) ** 2)
    ss_error = np.sum((y - grand) ** 2) - ss_rows - ss_cols
    msr, msc, mse = ss_rows / (n - 1), ss_cols / (k - 1), ss_error / ((n - 1) * (k - 1))
    c1 = (msr - mse) / (msr + (k - 1) * mse)
    a1 = (msr - mse) / (msr + (k - 1) * mse + k * (msc - mse) / n)
    return c1, a1, msr, msc, mse


# ------------------------------------------------------------------------------------- ICC


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("n", "k"), [(9, 2), (20, 3), (40, 5)])
def test_icc_matches_pingouin_icc3_and_icc2(seed: int, n: int, k: int) -> None:
    y = _ratings(np.random.default_rng(seed), n, k)
    res = stats.icc(y)
    c1, a1 = _pingouin_iccs(y)
    assert res.reason is None
    assert res.icc_c1 == pytest.approx(c1, abs=1e-10)
    assert res.icc_a1 == pytest.approx(a1, abs=1e-10)
    assert (res.n, res.k) == (n, k)


def test_icc_anova_terms_match_paper_listing() -> None:
    y = _ratings(np.random.default_rng(7), 9, 2)
    c1, a1, msr, msc, mse = _listing1_icc(y)
    res = stats.icc(y)
    assert (res.icc_c1, res.icc_a1) == (pytest.approx(c1, abs=1e-12), pytest.approx(a1, abs=1e-12))
    assert (res.msr, res.msc, res.mse) == (
        pytest.approx(msr, rel=1e-12),
        pytest.approx(msc, rel=1e-12),
        pytest.approx(mse, rel=1e-12),
    )


def test_icc_batch_equals_loop_of_single_matrices() -> None:
    rng = np.random.default_rng(3)
    stack = np.stack([_ratings(rng, 9, 2) for _ in range(50)])
    c1, a1 = stats.icc_batch(stack)
    loop = [stats.icc(m) for m in stack]
    np.testing.assert_allclose(c1, [r.icc_c1 for r in loop], atol=1e-12)
    np.testing.assert_allclose(a1, [r.icc_a1 for r in loop], atol=1e-12)
    assert c1.shape == (50,)


def test_icc_perfect_consistency_with_offset() -> None:
    human = np.array([2.1, 2.8, 3.2, 3.7, 4.1])  # Appendix H, Scenario A
    res = stats.icc(np.column_stack([human, human + 0.8]))
    assert res.icc_c1 == pytest.approx(1.0, abs=1e-12)
    assert res.icc_a1 < 0.8  # the offset costs absolute agreement, not consistency


def test_icc_constant_ratings_is_nan_with_reason() -> None:
    res = stats.icc(np.full((6, 2), 4.0))
    assert math.isnan(res.icc_c1) and math.isnan(res.icc_a1)
    assert "constant" in res.reason


def test_icc_identical_rows_is_nan_not_roundoff() -> None:
    # The same responder drawn n times: MSR and MSE are round-off, not 0/0 = some number.
    row = np.array([[4.333333333333333, 4.777777777777778]])
    res = stats.icc(np.repeat(row, 9, axis=0))
    assert math.isnan(res.icc_c1)
    assert res.reason


@pytest.mark.parametrize("y", [np.array([[3.0, 4.0]]), np.empty((0, 2))])
def test_icc_fewer_than_two_targets(y: np.ndarray) -> None:
    res = stats.icc(y)
    assert math.isnan(res.icc_c1)
    assert "n=" in res.reason


def test_icc_single_rater() -> None:
    res = stats.icc(np.arange(5.0)[:, None])
    assert math.isnan(res.icc_c1) and "k=1" in res.reason


def test_icc_all_nan() -> None:
    res = stats.icc(np.full((5, 2), np.nan))
    assert math.isnan(res.icc_c1)
    assert res.n_dropped == 5 and "missing" in res.reason


def test_icc_drops_rows_with_missing_cells() -> None:
    y = _ratings(np.random.default_rng(11), 12, 3)
    holey = y.copy()
    holey[[2, 7], [0, 2]] = np.nan
    res = stats.icc(holey)
    complete = np.delete(y, [2, 7], axis=0)
    c1, a1 = _pingouin_iccs(complete)
    assert res.n_dropped == 2 and res.n == 10
    assert res.icc_c1 == pytest.approx(c1, abs=1e-10)
    assert res.icc_a1 == pytest.approx(a1, abs=1e-10)


def test_icc_rejects_wrong_shape() -> None:
    with pytest.raises(ValueError):
        stats.icc(np.arange(5.0))


# ------------------------------------------------------------------------------- bootstrap


def test_bootstrap_percentiles_equal_explicit_loop() -> None:
    y = _ratings(np.random.default_rng(5), 9, 2, spread=1.5)
    res = stats.bootstrap_icc_ci(y, n_boot=500, seed=42)
    idx = np.random.default_rng(42).integers(0, 9, size=(500, 9))
    reps = np.array([stats.icc(y[i]).icc_c1 for i in idx])
    reps = reps[np.isfinite(reps)]
    lo, hi = np.percentile(reps, [2.5, 97.5])
    assert res.ci_low == pytest.approx(lo, abs=1e-12)
    assert res.ci_high == pytest.approx(hi, abs=1e-12)
    assert res.ci_width == pytest.approx(hi - lo, abs=1e-12)
    assert res.icc_c1 == pytest.approx(stats.icc(y).icc_c1)
    assert res.n_valid == 500 and res.n_dropped == 0
    assert res.method == "responders"
    assert res.ci_low <= res.icc_c1 <= res.ci_high


def test_bootstrap_is_reproducible_and_seed_sensitive() -> None:
    y = _ratings(np.random.default_rng(1), 9, 2)
    a = stats.bootstrap_icc_ci(y, seed=3)
    b = stats.bootstrap_icc_ci(y, seed=np.random.default_rng(3))
    c = stats.bootstrap_icc_ci(y, seed=4)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    assert a.n_boot == 1000


def test_bootstrap_drops_and_counts_undefined_resamples() -> None:
    # Two targets: half of the resamples draw the same row twice, where ICC is undefined.
    y = np.array([[1.0, 1.5], [4.0, 4.2]])
    res = stats.bootstrap_icc_ci(y, n_boot=2000, seed=0)
    assert res.n_valid + res.n_dropped == 2000
    assert 850 < res.n_dropped < 1150
    assert np.isfinite(res.ci_low)


def test_bootstrap_degenerate_input_gives_nan_and_reason() -> None:
    res = stats.bootstrap_icc_ci(np.full((9, 2), 3.0), seed=0)
    assert math.isnan(res.ci_low) and res.status is None and res.reason
    res = stats.bootstrap_icc_ci(np.array([[3.0, 4.0]]), seed=0)
    assert math.isnan(res.ci_width) and "n=1" in res.reason


@pytest.mark.parametrize(
    ("width", "status"),
    [(0.0, "GR"), (0.355, "GR"), (0.3551, "MR"), (0.56, "MR"), (0.5601, "PR"), (math.nan, None)],
)
def test_reliability_status_thresholds(width: float, status: str | None) -> None:
    assert stats.reliability_status(width) == status


def test_reliability_status_custom_thresholds() -> None:
    assert stats.reliability_status(0.3, good_max=0.2, moderate_max=0.4) == "MR"


def _panel(rng: np.random.Generator, n: int, m: int, noise: float) -> tuple[np.ndarray, ...]:
    quality = np.linspace(3.0, 4.6, n)[:, None]
    human = quality + rng.normal(scale=noise, size=(n, m))
    judge = quality + 0.3 + rng.normal(scale=noise, size=(n, m))
    return human, judge


def test_two_stage_equals_one_stage_without_within_responder_variation() -> None:
    rng = np.random.default_rng(0)
    means = _ratings(rng, 9, 2)
    human = np.repeat(means[:, :1], 30, axis=1)
    judge = np.repeat(means[:, 1:], 30, axis=1)
    two = stats.bootstrap_icc_ci_two_stage(human, judge, n_boot=400, seed=9)
    one = stats.bootstrap_icc_ci(means, n_boot=400, seed=9)
    assert two.method == "two-stage"
    assert two.icc_c1 == pytest.approx(one.icc_c1, abs=1e-12)
    assert two.ci_low == pytest.approx(one.ci_low, abs=1e-9)
    assert two.ci_high == pytest.approx(one.ci_high, abs=1e-9)


def test_two_stage_draws_the_conversations_once_for_every_responder() -> None:
    """The crossed design: a hard conversation lowers every responder's clinician scores alike,
    a column shift that ICC(C,1) ignores. Drawn once per resample for all responders, such a
    conversation effect leaves the interval that of the responders alone; drawn per responder
    (as it once was) it became spread between responders and widened the interval."""
    rng = np.random.default_rng(5)
    quality = np.linspace(2.5, 4.5, 10)[:, None]
    difficulty = rng.normal(0.0, 1.0, size=(1, 40))
    human = quality + difficulty
    judge = np.repeat(quality + 0.3 + rng.normal(0.0, 0.3, size=(10, 1)), 40, axis=1)
    two = stats.bootstrap_icc_ci_two_stage(human, judge, n_boot=400, seed=9)
    means = np.column_stack([human.mean(axis=1), judge.mean(axis=1)])
    one = stats.bootstrap_icc_ci(means, n_boot=400, seed=9)
    assert two.ci_low == pytest.approx(one.ci_low, abs=1e-9)
    assert two.ci_high == pytest.approx(one.ci_high, abs=1e-9)


def test_two_stage_is_wider_when_conversations_are_noisy() -> None:
    widths_one, widths_two = [], []
    for seed in range(5):
        human, judge = _panel(np.random.default_rng(seed), 9, 20, noise=1.2)
        means = np.column_stack([human.mean(axis=1), judge.mean(axis=1)])
        widths_one.append(stats.bootstrap_icc_ci(means, seed=seed).ci_width)
        widths_two.append(stats.bootstrap_icc_ci_two_stage(human, judge, seed=seed).ci_width)
    assert np.mean(widths_two) > np.mean(widths_one) + 0.02


def test_two_stage_uses_only_paired_cells_and_drops_empty_responders() -> None:
    human, judge = _panel(np.random.default_rng(2), 6, 15, noise=0.5)
    human[0, :5] = np.nan
    judge[1, 10:] = np.nan
    judge[5, :] = np.nan  # responder 5 has no paired conversation
    res = stats.bootstrap_icc_ci_two_stage(human, judge, n_boot=200, seed=0)
    paired = np.isfinite(human) & np.isfinite(judge)
    means = np.array([[human[r, paired[r]].mean(), judge[r, paired[r]].mean()] for r in range(5)])
    assert res.n == 5
    assert res.icc_c1 == pytest.approx(stats.icc(means).icc_c1, abs=1e-12)
    assert np.isfinite(res.ci_low)


# ------------------------------------------------------------------------- bias and errors


def test_mean_bias_and_normalisation() -> None:
    res = stats.mean_bias([3.0, 4.0, np.nan, 2.0], [3.5, 4.0, 5.0, 3.0])
    assert res.n == 3
    assert res.bias == pytest.approx(0.5)
    assert res.abs_bias_norm == pytest.approx(0.125)
    assert (res.human_mean, res.judge_mean) == (pytest.approx(3.0), pytest.approx(3.5))
    empty = stats.mean_bias([np.nan], [1.0])
    assert math.isnan(empty.bias) and empty.reason


def test_error_metrics_match_sklearn() -> None:
    rng = np.random.default_rng(4)
    human = rng.integers(1, 6, 200).astype(float)
    judge = rng.integers(1, 6, 200).astype(float)
    human[:7] = np.nan
    res = stats.error_metrics(human, judge)
    h, j = human[7:], judge[7:]
    assert res.n_pairs == 193
    assert res.mse == pytest.approx(sk_metrics.mean_squared_error(h, j), rel=1e-12)
    assert res.rmse == pytest.approx(math.sqrt(sk_metrics.mean_squared_error(h, j)), rel=1e-12)
    assert res.mae == pytest.approx(sk_metrics.mean_absolute_error(h, j), rel=1e-12)
    assert res.bias == pytest.approx(np.mean(j - h))
    assert res.human_sd == pytest.approx(np.std(h, ddof=1))
    assert res.judge_sd == pytest.approx(np.std(j, ddof=1))


def test_error_metrics_degenerate() -> None:
    assert stats.error_metrics([np.nan], [np.nan]).reason == "no paired ratings"
    single = stats.error_metrics([3.0], [4.0])
    assert single.mse == 1.0 and math.isnan(single.human_sd) and single.reason


def test_alignment_factor_is_mean_abs_difference_over_items_and_attributes() -> None:
    human = np.array([[5, 4, 3], [2, 2, np.nan]], dtype=float)
    judge = np.array([[4, 4, 5], [2, 5, 1]], dtype=float)
    # |−1| + 0 + 2 + 0 + 3 over the 5 paired cells
    assert stats.alignment_factor(human, judge).value == pytest.approx(6 / 5)
    assert math.isnan(stats.alignment_factor([np.nan], [1.0]).value)


# ------------------------------------------------------------------------------ composites


def test_composite_scores_default_groups() -> None:
    scores = np.array([[1, 2, 3, 4, 5, 5, 2], [5, 5, 5, 5, 1, 1, 1]], dtype=float)
    out = stats.composite_scores(scores, stats.ATTRIBUTES)
    np.testing.assert_allclose(out["CSS"], [2.5, 5.0])
    np.testing.assert_allclose(out["ARS"], [4.0, 1.0])


def test_composite_scores_missing_attribute_and_custom_groups() -> None:
    scores = np.array([[1.0, np.nan, 3.0]])
    out = stats.composite_scores(scores, ["a", "b", "c"], {"AC": ("a", "c"), "AB": ("a", "b")})
    assert out["AC"][0] == 2.0
    assert math.isnan(out["AB"][0])
    missing = stats.composite_scores(scores, ["a", "b", "c"])  # default groups: names absent
    assert np.isnan(missing["CSS"]).all()


# --------------------------------------------------------------------------------- ranking


def test_ranking_matches_pandas_rank_with_ties() -> None:
    rng = np.random.default_rng(8)
    means = rng.integers(1, 5, size=(9, 7)).astype(float)  # many ties
    res = stats.ranking(means)
    expected = pd.DataFrame(means).rank(ascending=False, method="average").to_numpy()
    np.testing.assert_allclose(res.ranks, expected)
    np.testing.assert_allclose(res.mean_rank, expected.mean(axis=1))
    np.testing.assert_allclose(res.overall_mean, means.mean(axis=1))
    np.testing.assert_allclose(
        res.overall_rank, pd.Series(means.mean(axis=1)).rank(ascending=False).to_numpy()
    )


def test_ranking_best_is_one_and_nan_stays_nan() -> None:
    res = stats.ranking(np.array([[4.5, 3.0], [3.0, np.nan], [4.0, 4.0]]))
    np.testing.assert_allclose(res.ranks[:, 0], [1, 3, 2])
    assert math.isnan(res.ranks[1, 1])
    np.testing.assert_allclose(res.ranks[[0, 2], 1], [2, 1])
    assert res.mean_rank[1] == 3.0  # averaged over the attribute it was ranked on


# --------------------------------------------------------------------- inter-rater agreement


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
@pytest.mark.parametrize("seed", range(4))
def test_weighted_kappa_matches_sklearn(weights: str | None, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 6, 300)
    b = np.clip(a + rng.integers(-1, 2, 300), 1, 5)
    ours = stats.weighted_kappa(a, b, weights=weights)
    ref = sk_metrics.cohen_kappa_score(a, b, weights=weights)
    assert ours.value == pytest.approx(ref, abs=1e-12)


def test_weighted_kappa_with_full_scale_labels_matches_sklearn() -> None:
    a = np.array([1, 3, 5, 3, 1, 5, 3, 3])
    b = np.array([1, 3, 3, 5, 1, 5, 3, 1])
    for weights in ("linear", "quadratic"):
        ours = stats.weighted_kappa(a, b, weights=weights, labels=range(1, 6))
        ref = sk_metrics.cohen_kappa_score(a, b, weights=weights, labels=[1, 2, 3, 4, 5])
        assert ours.value == pytest.approx(ref, abs=1e-12)


def test_weighted_kappa_drops_missing_pairs_and_handles_degenerate() -> None:
    a = np.array([1, 2, np.nan, 4, 5, 3])
    b = np.array([1, 3, 2, np.nan, 5, 3])
    ours = stats.weighted_kappa(a, b, weights="quadratic")
    ref = sk_metrics.cohen_kappa_score([1, 2, 5, 3], [1, 3, 5, 3], weights="quadratic")
    assert ours.value == pytest.approx(ref, abs=1e-12)
    single = stats.weighted_kappa([4, 4, 4], [4, 4, 4])
    assert math.isnan(single.value) and "single category" in single.reason
    assert math.isnan(stats.weighted_kappa([1.0], [1.0]).value)


# Krippendorff (2011), "Computing Krippendorff's alpha-reliability", worked example with
# 4 observers × 12 units and missing values; published alphas rounded to 3 decimals.
_KRIPP_EXAMPLE = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, np.nan, np.nan, np.nan],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, np.nan, 3],
        [np.nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, np.nan],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, np.nan],
    ]
).T  # our orientation: items × raters


@pytest.mark.parametrize(
    ("level", "expected"), [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)]
)
def test_krippendorff_alpha_published_example(level: str, expected: float) -> None:
    assert stats.krippendorff_alpha(_KRIPP_EXAMPLE, level=level).value == pytest.approx(
        expected, abs=5e-4
    )


def _interval_alpha_by_hand(items_by_raters: np.ndarray) -> float:
    """Interval alpha from its definition: 1 − D_o / D_e over pairable values."""
    units = [row[np.isfinite(row)] for row in items_by_raters]
    units = [u for u in units if u.size >= 2]
    values = np.concatenate(units)
    n = values.size
    d_o = sum(((u[:, None] - u[None, :]) ** 2).sum() / (u.size - 1) for u in units) / n
    d_e = ((values[:, None] - values[None, :]) ** 2).sum() / (n * (n - 1))
    return 1.0 - d_o / d_e


def test_krippendorff_interval_matches_definition_on_random_data() -> None:
    rng = np.random.default_rng(12)
    truth = rng.integers(1, 6, size=(60, 1)).astype(float)
    ratings = np.clip(truth + rng.integers(-1, 2, size=(60, 3)), 1, 5)
    ratings[rng.random(ratings.shape) < 0.2] = np.nan
    ours = stats.krippendorff_alpha(ratings, level="interval").value
    assert ours == pytest.approx(_interval_alpha_by_hand(ratings), abs=1e-10)


def test_krippendorff_degenerate_cases() -> None:
    no_overlap = np.array([[1.0, np.nan], [np.nan, 3.0]])
    assert "two or more" in stats.krippendorff_alpha(no_overlap).reason
    constant = np.full((4, 2), 3.0)
    res = stats.krippendorff_alpha(constant)
    assert math.isnan(res.value) and "identical" in res.reason


# ------------------------------------------------------------------------------- guidance


@pytest.mark.parametrize(
    ("icc_c1", "width", "verdict"),
    [
        (0.88, 0.21, "suitable"),
        (0.91, 0.53, "needs validation"),
        (0.40, 0.30, "unreliable"),
        (0.31, 0.76, "unsuitable"),  # Appendix H Scenario B
    ],
)
def test_reliability_guidance_quadrants(icc_c1: float, width: float, verdict: str) -> None:
    res = stats.reliability_guidance(icc_c1, width)
    assert res.verdict == verdict
    assert res.text.endswith(".") and res.text.count(". ") == 0  # one sentence
    assert res.reason is None


def test_reliability_guidance_thresholds_are_parameters_and_inclusive() -> None:
    assert stats.reliability_guidance(0.75, 0.355).verdict == "suitable"
    assert stats.reliability_guidance(0.80, 0.30, high_icc=0.9).verdict == "unreliable"
    assert stats.reliability_guidance(0.80, 0.40, narrow_ci=0.56).verdict == "suitable"
    nan = stats.reliability_guidance(math.nan, 0.3)
    assert nan.verdict is None and nan.reason


# ---------------------------------------------------------------------------- calibration


def test_calibration_recovers_exact_affine_relation() -> None:
    rng = np.random.default_rng(0)
    judge = rng.integers(1, 6, 400).astype(float)
    human = 1.0 + 0.5 * judge
    res = stats.calibrate_affine(human, judge, seed=1)
    assert (res.a, res.b) == (pytest.approx(1.0), pytest.approx(0.5))
    assert (res.n_train, res.n_test) == (280, 120)
    assert res.after.mae == pytest.approx(0.0, abs=1e-12)
    assert res.before.mae > 0.4


def test_calibration_matches_polyfit_on_seeded_split() -> None:
    rng = np.random.default_rng(3)
    judge = rng.normal(4, 0.7, 300)
    human = 0.8 + 0.7 * judge + rng.normal(0, 0.4, 300)
    res = stats.calibrate_affine(human, judge, train_fraction=0.7, seed=5)
    perm = np.random.default_rng(5).permutation(300)
    train, test = perm[:210], perm[210:]
    b, a = np.polyfit(judge[train], human[train], 1)
    assert (res.a, res.b) == (pytest.approx(a, rel=1e-10), pytest.approx(b, rel=1e-10))
    corrected = a + b * judge[test]
    assert res.after.rmse == pytest.approx(np.sqrt(np.mean((corrected - human[test]) ** 2)))
    assert res.before.bias == pytest.approx(np.mean(judge[test] - human[test]))
    again = stats.calibrate_affine(human, judge, train_fraction=0.7, seed=5)
    assert (again.a, again.b) == (res.a, res.b)


def test_calibration_degenerate() -> None:
    const = stats.calibrate_affine(np.arange(10.0), np.full(10, 5.0))
    assert math.isnan(const.b) and "constant" in const.reason and const.before is not None
    tiny = stats.calibrate_affine([1.0, 2.0], [1.0, 2.0])
    assert math.isnan(tiny.a) and tiny.reason


def test_krippendorff_value_domain_treats_out_of_scale_values_as_missing() -> None:
    ratings = np.array([[1, 2], [3, 3], [0, 5], [4, 4], [5, 4]], dtype=float)
    with_domain = stats.krippendorff_alpha(ratings, level="ordinal", value_domain=range(1, 6))
    without_stray = stats.krippendorff_alpha(ratings[[0, 1, 3, 4]], level="ordinal")
    assert with_domain.value == pytest.approx(without_stray.value, abs=1e-12)
