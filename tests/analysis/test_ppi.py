"""analysis.ppi against the reference implementation ppi_py (a test dependency)."""

from __future__ import annotations

import numpy as np
import pytest
from ppi_py import classical_mean_ci, ppi_mean_ci, ppi_mean_pointestimate
from scipy import stats as sps

from analysis import ppi

TOL = 1e-9


def _reference(y, f, fu, alpha=0.05):
    est = float(np.asarray(ppi_mean_pointestimate(y, f, fu, lam=None)).ravel()[0])
    low, high = (float(np.asarray(v).ravel()[0]) for v in ppi_mean_ci(y, f, fu, alpha=alpha))
    return est, low, high


def _lam_reference(y, f, fu):
    # ppi_py does not return λ; recover it from the point estimate, which is linear in λ.
    est, _, _ = _reference(y, f, fu)
    return (est - y.mean()) / (fu.mean() - f.mean())


def _cell(rng, n, big_n, rho):
    truth = rng.normal(3.0, 0.8, n + big_n)
    judge = rho * truth + np.sqrt(1 - rho**2) * rng.normal(3.0, 0.8, n + big_n) + 0.5
    y = np.clip(np.rint(truth * 2) / 2, 1, 5)
    return y[:n], judge[:n], judge[n:]


@pytest.mark.parametrize("seed", range(12))
def test_matches_ppi_py_on_random_cells(seed):
    rng = np.random.default_rng(seed)
    n, big_n = int(rng.integers(3, 200)), int(rng.integers(1, 800))
    y, f, fu = _cell(rng, n, big_n, rho=float(rng.uniform(0.0, 0.95)))
    got = ppi.ppi_mean(y, f, fu, alpha=0.05, interval="z")
    est, low, high = _reference(y, f, fu)
    assert got.estimate[0] == pytest.approx(est, abs=TOL)
    assert got.ci_low[0] == pytest.approx(low, abs=TOL)
    assert got.ci_high[0] == pytest.approx(high, abs=TOL)
    if 0 < got.lam[0] < 1:
        assert got.lam[0] == pytest.approx(_lam_reference(y, f, fu), abs=1e-7)
    c_low, c_high = classical_mean_ci(y, alpha=0.05)
    assert got.clinician_only_ci_low[0] == pytest.approx(c_low, abs=TOL)
    assert got.clinician_only_ci_high[0] == pytest.approx(c_high, abs=TOL)
    assert got.judge_only_mean[0] == pytest.approx(np.concatenate([f, fu]).mean(), abs=TOL)


def test_many_cells_at_once_equal_one_cell_at_a_time():
    rng = np.random.default_rng(3)
    ys, fs, fus, g, gu = [], [], [], [], []
    for c in range(9):
        y, f, fu = _cell(rng, 20 + 7 * c, 100 + 13 * c, rho=0.1 * c)
        ys.append(y), fs.append(f), fus.append(fu)
        g.append(np.full(y.size, c)), gu.append(np.full(fu.size, c))
    got = ppi.ppi_mean_cells(
        y=np.concatenate(ys),
        f=np.concatenate(fs),
        cell=np.concatenate(g),
        f_unlabelled=np.concatenate(fus),
        cell_unlabelled=np.concatenate(gu),
        n_cells=9,
        alpha=0.1,
        interval="z",
    )
    for c in range(9):
        est, low, high = _reference(ys[c], fs[c], fus[c], alpha=0.1)
        assert got.estimate[c] == pytest.approx(est, abs=TOL)
        assert (got.ci_low[c], got.ci_high[c]) == pytest.approx((low, high), abs=TOL)
        assert got.n_labelled[c] == ys[c].size and got.n_unlabelled[c] == fus[c].size


def test_two_labelled_observations():
    y, f, fu = np.array([2.0, 4.0]), np.array([2.5, 3.0]), np.array([3.0, 1.0, 4.5, 2.0])
    got = ppi.ppi_mean(y, f, fu, interval="z")
    est, low, high = _reference(y, f, fu)
    assert (got.estimate[0], got.ci_low[0], got.ci_high[0]) == pytest.approx(
        (est, low, high), abs=TOL
    )


def test_one_labelled_observation_gives_no_interval():
    got = ppi.ppi_mean(np.array([3.0]), np.array([3.0]), np.array([2.0, 4.0]))
    assert np.isnan(got.estimate[0]) and np.isnan(got.ci_low[0]) and got.n_labelled[0] == 1


def test_judge_constant_on_labelled_gives_lambda_zero_and_clinician_interval():
    rng = np.random.default_rng(1)
    y = rng.integers(1, 6, 40).astype(float)
    f, fu = np.full(40, 3.0), rng.integers(1, 6, 300).astype(float)
    got = ppi.ppi_mean(y, f, fu, interval="z")
    est, low, high = _reference(y, f, fu)
    assert got.lam[0] == 0.0
    assert (got.estimate[0], got.ci_low[0], got.ci_high[0]) == pytest.approx(
        (est, low, high), abs=TOL
    )
    assert got.width_ratio[0] == pytest.approx(1.0, abs=TOL)


def test_judge_constant_everywhere_is_clinician_only_where_ppi_py_divides_zero_by_zero():
    rng = np.random.default_rng(2)
    y = rng.integers(1, 6, 30).astype(float)
    f, fu = np.full(30, 4.0), np.full(200, 4.0)
    got = ppi.ppi_mean(y, f, fu, interval="z")
    # Every λ gives the same estimate and interval here; ppi_py's λ is 0/0, so compare with λ=0.
    low, high = (float(np.ravel(v)[0]) for v in ppi_mean_ci(y, f, fu, alpha=0.05, lam=0.0))
    assert got.lam[0] == 0.0
    assert got.estimate[0] == pytest.approx(y.mean(), abs=TOL)
    assert (got.ci_low[0], got.ci_high[0]) == pytest.approx((low, high), abs=TOL)


def test_uncorrelated_judge_gives_lambda_near_zero_and_clinician_only_interval():
    rng = np.random.default_rng(5)
    y, f, fu = _cell(rng, 400, 4000, rho=0.0)
    got = ppi.ppi_mean(y, f, fu, interval="z")
    est, low, high = _reference(y, f, fu)
    assert got.lam[0] < 0.1
    assert (got.estimate[0], got.ci_low[0], got.ci_high[0]) == pytest.approx(
        (est, low, high), abs=TOL
    )
    assert got.ci_high[0] - got.ci_low[0] == pytest.approx(
        got.clinician_only_ci_high[0] - got.clinician_only_ci_low[0], rel=0.01
    )


def test_negatively_correlated_judge_is_clipped_to_clinician_only():
    rng = np.random.default_rng(6)
    y, f, fu = _cell(rng, 100, 500, rho=0.0)
    f = -y + rng.normal(0, 0.1, y.size)
    got = ppi.ppi_mean(y, f, fu, interval="z")
    est, low, high = _reference(y, f, fu)
    assert got.lam[0] == 0.0
    assert got.estimate[0] == pytest.approx(y.mean(), abs=TOL) == pytest.approx(est, abs=TOL)
    assert (got.ci_low[0], got.ci_high[0]) == pytest.approx((low, high), abs=TOL)


def test_good_judge_narrows_the_interval_and_saves_ratings():
    rng = np.random.default_rng(8)
    y, f, fu = _cell(rng, 100, 2000, rho=0.9)
    got = ppi.ppi_mean(y, f, fu)
    assert got.width_ratio[0] < 0.8
    assert got.ratings_saved[0] == pytest.approx(1 - got.width_ratio[0] ** 2)


def test_no_unlabelled_conversation_gives_the_clinician_mean():
    y, f = np.array([1.0, 2.0, 4.0]), np.array([1.5, 2.0, 3.5])
    got = ppi.ppi_mean(y, f, np.array([]))
    assert got.lam[0] == 0.0 and got.estimate[0] == pytest.approx(y.mean())
    assert got.ci_low[0] == pytest.approx(got.clinician_only_ci_low[0])


@pytest.mark.parametrize("seed", range(6))
def test_t_interval_without_judge_help_is_the_textbook_t_interval(seed):
    """λ = 0 (no unlabelled conversation): the product's interval is statsmodels' t interval
    of the clinician mean, and the judge-assisted interval is exactly the clinician-only one."""
    from statsmodels.stats.weightstats import DescrStatsW

    rng = np.random.default_rng(seed)
    y, f, _ = _cell(rng, int(rng.integers(3, 60)), 0, rho=0.5)
    got = ppi.ppi_mean(y, f, np.array([]), alpha=0.1)
    low, high = DescrStatsW(y).tconfint_mean(alpha=0.1)
    assert got.interval == "t" and got.lam[0] == 0.0
    assert (got.clinician_only_ci_low[0], got.clinician_only_ci_high[0]) == pytest.approx(
        (low, high), abs=TOL
    )
    assert (got.ci_low[0], got.ci_high[0]) == (
        got.clinician_only_ci_low[0],
        got.clinician_only_ci_high[0],
    )
    assert got.width_ratio[0] == 1.0


@pytest.mark.parametrize("seed", range(6))
def test_t_interval_keeps_ppi_py_estimate_and_lambda_with_sample_variances(seed):
    rng = np.random.default_rng(seed)
    n, big_n = int(rng.integers(5, 120)), int(rng.integers(5, 600))
    y, f, fu = _cell(rng, n, big_n, rho=float(rng.uniform(0.3, 0.95)))
    t_int = ppi.ppi_mean(y, f, fu, alpha=0.05)
    z_int = ppi.ppi_mean(y, f, fu, alpha=0.05, interval="z")
    est, _, _ = _reference(y, f, fu)
    assert t_int.estimate[0] == pytest.approx(est, abs=TOL) and t_int.lam[0] == z_int.lam[0]
    lam = t_int.lam[0]
    se = np.sqrt(lam**2 * np.var(fu, ddof=1) / big_n + np.var(y - lam * f, ddof=1) / n)
    half = sps.t.ppf(0.975, n - 1) * se
    assert (t_int.ci_low[0], t_int.ci_high[0]) == pytest.approx((est - half, est + half), abs=TOL)
    assert t_int.ci_high[0] - t_int.ci_low[0] > z_int.ci_high[0] - z_int.ci_low[0]


def test_unknown_interval_is_refused():
    with pytest.raises(ValueError, match="interval must be one of bounded, t, z"):
        ppi.ppi_mean(np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array([3.0]), interval="x")


@pytest.mark.parametrize("alpha", [0.0, 1.0, -0.1, 2.0])
def test_bad_alpha_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha"):
        ppi.ppi_mean(np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array([3.0]), alpha=alpha)


def test_nan_input_is_refused():
    with pytest.raises(ValueError, match="NaN"):
        ppi.ppi_mean(np.array([1.0, np.nan]), np.array([1.0, 2.0]), np.array([3.0]))


def _crossfit_reference(y, x, fold, xu, k_folds, alpha=0.05):
    """Predictions from scikit-learn's LinearRegression per fold, then ppi_py's cross-PPI."""
    from ppi_py import crossppi_mean_ci, crossppi_mean_pointestimate
    from sklearn.linear_model import LinearRegression

    yhat = np.empty(y.size)
    yhat_u = np.empty((xu.shape[0], k_folds))
    for k in range(k_folds):
        model = LinearRegression().fit(x[fold != k], y[fold != k])
        yhat[fold == k] = model.predict(x[fold == k])
        yhat_u[:, k] = model.predict(xu)
    est = float(np.ravel(crossppi_mean_pointestimate(y, yhat, yhat_u))[0])
    low, high = (float(np.ravel(v)[0]) for v in crossppi_mean_ci(y, yhat, yhat_u, alpha=alpha))
    return est, low, high


@pytest.mark.parametrize("seed", range(4))
def test_cross_fitted_predictor_matches_sklearn_and_ppi_py(seed):
    rng = np.random.default_rng(seed)
    ys, xs, folds, xus, g, gu, refs = [], [], [], [], [], [], []
    for c in range(3):
        n, big_n = int(rng.integers(30, 120)), int(rng.integers(50, 400))
        truth = rng.normal(3, 1, n + big_n)
        x = np.column_stack(
            [truth * 0.6 + rng.normal(0, 1, truth.size), truth * 0.3 + rng.normal(1, 1, truth.size)]
        )
        y, xl, xu = truth[:n], x[:n], x[n:]
        fold = rng.permutation(np.arange(n) % 5)
        refs.append(_crossfit_reference(y, xl, fold, xu, 5))
        ys.append(y), xs.append(xl), folds.append(fold), xus.append(xu)
        g.append(np.full(n, c)), gu.append(np.full(big_n, c))
    got = ppi.crossppi_mean_cells(
        y=np.concatenate(ys), x=np.vstack(xs), cell=np.concatenate(g),
        fold=np.concatenate(folds), x_unlabelled=np.vstack(xus),
        cell_unlabelled=np.concatenate(gu), n_cells=3, n_folds=5,
    )  # fmt: skip
    for c, (est, low, high) in enumerate(refs):
        assert got.estimate[c] == pytest.approx(est, abs=1e-9)
        assert (got.ci_low[c], got.ci_high[c]) == pytest.approx((low, high), abs=1e-9)


def test_cross_fitting_needs_two_labelled_per_fold():
    got = ppi.crossppi_mean_cells(
        y=np.arange(6.0), x=np.arange(6.0), cell=np.zeros(6, int), fold=np.arange(6) % 5,
        x_unlabelled=np.arange(3.0), cell_unlabelled=np.zeros(3, int), n_cells=1, n_folds=5,
    )  # fmt: skip
    assert np.isnan(got.estimate[0]) and got.n_labelled[0] == 6


# ---------------------------------------------------------------- IPW (active inference)

Z95 = 1.959963984540054


def test_ipw_fixed_lambda_equals_closed_form_by_hand():
    # f = [2, 4, 3, 5], conversations 1 and 3 labelled with π = 0.5 and 0.25, λ = 0.5:
    # terms λf + (Y − λf)ξ/π = [1 + 2·2, 2, 1.5 + 2.5·4, 2.5] = [5, 2, 11.5, 2.5];
    # mean 21/4 = 5.25; var₀ = (0.0625 + 10.5625 + 39.0625 + 7.5625)/4 = 14.3125; se² = var₀/4.
    got = ppi.ipw_mean_cells(
        y=[3.0, np.nan, 4.0, np.nan], f=[2.0, 4.0, 3.0, 5.0], labelled=[True, False, True, False],
        pi=[0.5, 0.5, 0.25, 0.25], cell=[0, 0, 0, 0], n_cells=1, lam=0.5,
    )  # fmt: skip
    se = np.sqrt(14.3125 / 4)
    assert got.estimate[0] == pytest.approx(5.25, abs=TOL)
    assert got.se[0] == pytest.approx(se, abs=TOL)
    assert (got.ci_low[0], got.ci_high[0]) == pytest.approx((5.25 - Z95 * se, 5.25 + Z95 * se))
    assert (got.n[0], got.n_labelled[0], got.lam[0]) == (4, 2, 0.5)


def test_ipw_tuned_lambda_equals_closed_form_by_hand():
    # a = f(1 − ξ/π) = [−2, 4, −9, 5], b = Yξ/π = [6, 0, 8, 0] with Y = [3, ·, 2, ·]:
    # var₀(a) = 125/4, cov₀(a, b) = −77/4, λ = 77/125 = 0.616;
    # terms λa + b = [4.768, 2.464, 2.456, 3.08], mean 3.192, var₀ = 3.568/4, se² = var₀/4.
    got = ppi.ipw_mean_cells(
        y=[3.0, np.nan, 2.0, np.nan], f=[2.0, 4.0, 3.0, 5.0], labelled=[True, False, True, False],
        pi=[0.5, 0.5, 0.25, 0.25], cell=[0, 0, 0, 0], n_cells=1,
    )  # fmt: skip
    assert got.lam[0] == pytest.approx(0.616, abs=TOL)
    assert got.estimate[0] == pytest.approx(3.192, abs=TOL)
    assert got.se[0] == pytest.approx(np.sqrt(3.568 / 16), abs=TOL)


def test_ipw_lambda_is_clipped_to_one_and_every_pi_one_is_the_clinician_mean():
    # Same design with Y = [3, ·, 4, ·]: −cov₀/var₀ = 36.25/31.25 = 1.16 → λ = 1,
    # terms f + (Y − f)ξ/π = [4, 4, 7, 5], mean 5.
    got = ppi.ipw_mean_cells(
        y=[3.0, np.nan, 4.0, np.nan], f=[2.0, 4.0, 3.0, 5.0], labelled=[True, False, True, False],
        pi=[0.5, 0.5, 0.25, 0.25], cell=[0, 0, 0, 0], n_cells=1,
    )  # fmt: skip
    assert (got.lam[0], got.estimate[0]) == pytest.approx((1.0, 5.0), abs=TOL)
    census = ppi.ipw_mean_cells(
        y=[3.0, 1.0, 4.0, 2.0], f=[2.0, 4.0, 3.0, 5.0], labelled=[True] * 4, pi=[1.0] * 4,
        cell=[0, 0, 0, 0], n_cells=1,
    )  # fmt: skip
    assert census.estimate[0] == pytest.approx(2.5, abs=TOL)
    assert census.se[0] == pytest.approx(np.sqrt(np.var([3.0, 1.0, 4.0, 2.0]) / 4), abs=TOL)


def test_ipw_cells_are_independent_and_a_cell_with_one_label_is_nan():
    rng = np.random.default_rng(5)
    f = rng.normal(3, 1, 60)
    y = f + rng.normal(0, 0.5, 60)
    lab = rng.random(60) < 0.5
    pi = np.full(60, 0.5)
    cell = np.repeat([0, 1, 2], 20)
    lab[40:] = False
    lab[40] = True  # cell 2: one labelled observation
    together = ppi.ipw_mean_cells(y=y, f=f, labelled=lab, pi=pi, cell=cell, n_cells=3)
    for c in range(2):
        s = cell == c
        alone = ppi.ipw_mean_cells(
            y=y[s], f=f[s], labelled=lab[s], pi=pi[s], cell=np.zeros(20), n_cells=1
        )
        assert together.estimate[c] == pytest.approx(alone.estimate[0], abs=TOL)
        assert together.se[c] == pytest.approx(alone.se[0], abs=TOL)
    assert np.isnan(together.estimate[2]) and together.n_labelled[2] == 1


@pytest.mark.parametrize(
    "change, message",
    [
        ({"pi": [0.5, 0.0, 0.5]}, "pi"),
        ({"pi": [0.5, 1.5, 0.5]}, "pi"),
        ({"y": [np.nan, 2.0, 3.0]}, "labelled"),
        ({"lam": 1.5}, "lam"),
        ({"cell": [0, 0]}, "match"),
    ],
)
def test_ipw_rejects_bad_input(change, message):
    args = dict(
        y=[1.0, 2.0, 3.0], f=[1.0, 2.0, 3.0], labelled=[True, False, True], pi=[0.5, 0.5, 0.5],
        cell=[0, 0, 0], n_cells=1,
    )  # fmt: skip
    with pytest.raises(ValueError, match=message):
        ppi.ipw_mean_cells(**{**args, **change})


def test_ipw_interval_covers_at_95_percent_with_unequal_probabilities():
    # 1,000 seeded replicates (one cell each) of 500 conversations from a population with
    # clinician mean 3; a biased, noisy judge; sampling probabilities from 0.1 to 0.6 rising
    # with the judge's score (as an active design would), so an estimator that ignored them
    # would be biased (treating them as uniform covers ~65 % here). The IPW interval must
    # cover the population mean 95 % of the time: within 3 binomial standard errors
    # (√(0.95·0.05/1000) ≈ 0.0069).
    rng = np.random.default_rng(20240613)
    reps, m = 1000, 500
    y = 3.0 + rng.normal(0, 0.8, (reps, m))
    f = 0.6 * y + rng.normal(0, 0.6, (reps, m)) + 1.5
    pi = 0.1 + 0.5 * np.clip((f - 2.5) / 2.5, 0, 1)
    lab = rng.random((reps, m)) < pi
    args = dict(
        y=np.where(lab, y, np.nan), f=f, labelled=lab, pi=pi,
        cell=np.repeat(np.arange(reps), m), n_cells=reps,
    )  # fmt: skip
    got = ppi.ipw_mean_cells(**args)
    coverage = np.mean((got.ci_low <= 3.0) & (3.0 <= got.ci_high))
    assert abs(coverage - 0.95) <= 3 * np.sqrt(0.95 * 0.05 / reps)
    # The judge carries information here, so tuning picks λ > 0 and narrows the interval
    # against the clinician-only IPW mean (λ = 0) on the same samples.
    assert np.all((got.lam >= 0) & (got.lam <= 1)) and np.median(got.lam) > 0.5
    assert np.median(got.se / ppi.ipw_mean_cells(**args, lam=0.0).se) < 0.5


def test_bounded_interval_is_the_t_interval_of_the_sample_completed_at_both_ends():
    """Half an observation at each end of the 1–5 scale: its mean shifts the centre, its
    squared standard error minus the plain one widens the interval; computed here with
    statsmodels' weighted statistics."""
    from statsmodels.stats.weightstats import DescrStatsW

    rng = np.random.default_rng(2)
    y = np.where(rng.random(60) < 0.95, 5.0, 4.0)
    est = ppi.ppi_mean_cells(
        y=y, f=y, cell=np.zeros(y.size, int), f_unlabelled=np.array([]),
        cell_unlabelled=np.array([], int), n_cells=1, interval="bounded", bounds=(1.0, 5.0),
    )  # fmt: skip
    completed = DescrStatsW(
        np.concatenate([y, [1.0, 5.0]]), weights=np.concatenate([np.ones(y.size), [0.5, 0.5]])
    )
    se2 = completed.var_ddof(1) / completed.sum_weights  # weights sum to n + 1
    half = sps.t.ppf(0.975, y.size - 1) * np.sqrt(se2)
    expected = (completed.mean - half, min(completed.mean + half, 5.0))
    assert (est.clinician_only_ci_low[0], est.clinician_only_ci_high[0]) == pytest.approx(
        expected, abs=TOL
    )
    assert est.clinician_only_estimate[0] == pytest.approx(y.mean(), abs=TOL)  # not shifted
    # No unlabelled pool: λ = 0 and the judge-assisted interval is the clinician-only one.
    assert (est.ci_low[0], est.ci_high[0]) == (
        est.clinician_only_ci_low[0],
        est.clinician_only_ci_high[0],
    )
    plain = ppi.ppi_mean(y, y, np.array([]), interval="t")
    assert est.ci_high[0] - est.ci_low[0] > plain.ci_high[0] - plain.ci_low[0]


def test_bounded_interval_gives_a_sample_without_spread_an_honest_width():
    y = np.full(100, 5.0)
    est = ppi.ppi_mean_cells(
        y=y, f=y, cell=np.zeros(100, int), f_unlabelled=np.array([]),
        cell_unlabelled=np.array([], int), n_cells=1, interval="bounded", bounds=(1.0, 5.0),
    )  # fmt: skip
    assert est.ci_high[0] == 5.0 and 4.85 < est.ci_low[0] < 4.99
    assert ppi.ppi_mean(y, y, np.array([])).ci_low[0] == 5.0  # what the t interval claims


def test_responses_without_a_judge_score_count_in_the_clinician_mean_only():
    rng = np.random.default_rng(5)
    y, f, fu = _cell(rng, 80, 400, rho=0.8)
    extra = np.array([1.0, 1.5, 2.0])
    est = ppi.ppi_mean_cells(
        y=y, f=f, cell=np.zeros(y.size, int), f_unlabelled=fu, cell_unlabelled=np.zeros(
            fu.size, int), n_cells=1, y_only=extra, cell_y_only=np.zeros(3, int),
    )  # fmt: skip
    everyone = np.concatenate([y, extra])
    assert est.clinician_only_estimate[0] == pytest.approx(everyone.mean(), abs=TOL)
    assert est.n_labelled[0] == 83 and est.n_judge_missing is not None
    assert est.n_judge_missing[0] == 3
    # θ̂ = Ȳ (all rated) + λ (f̄_U − f̄ of the judge-scored labelled).
    lam = est.lam[0]
    assert 0 < lam <= 1
    assert est.estimate[0] == pytest.approx(everyone.mean() + lam * (fu.mean() - f.mean()))


def test_nonresponse_is_taken_out_of_the_judges_correction_by_design():
    """With non-responded responses in both pools, the correction compares the judges' mean over
    all labelled responses (rated or not) with their mean over all unlabelled ones; λ may reach
    1/π̂ (π̂ the rated share). Unbiasedness and coverage under informative non-response are
    simulated in tests/analysis/test_judge_assisted.py."""
    rng = np.random.default_rng(6)
    rated = rng.normal(4, 0.5, 1000)
    f_rated = rated + rng.normal(0, 0.1, 1000)
    junk = np.full(250, 1.0)  # clinicians skip it, the judge scores it 1
    f_unl = np.concatenate([f_rated[100:], junk[25:]])
    est = ppi.ppi_mean_cells(
        y=rated[:100], f=f_rated[:100], cell=np.zeros(100, int),
        f_unlabelled=f_unl, cell_unlabelled=np.zeros(f_unl.size, int), n_cells=1,
        f_nonresponse=junk[:25], cell_nonresponse=np.zeros(25, int),
    )  # fmt: skip
    assert est.rated_share is not None and est.rated_share[0] == pytest.approx(0.8)
    assert est.n_nonresponse is not None and est.n_nonresponse[0] == 25
    lam = est.lam[0]
    assert 0 < lam <= 1.25
    f_all_labelled = np.concatenate([f_rated[:100], junk[:25]])
    assert est.estimate[0] == pytest.approx(
        rated[:100].mean() + lam * (f_unl.mean() - f_all_labelled.mean()), abs=TOL
    )
    assert abs(est.estimate[0] - rated.mean()) < 2 * est.se[0]
