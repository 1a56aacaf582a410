"""analysis.distortions.agreement against statsmodels (Fleiss' kappa), sklearn (weighted F1), a
simulation (F1_random) and the paper's formula (κ_F1), and on degenerate input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.distortions.agreement import (
    f1_random_baseline,
    fleiss_kappa,
    fleiss_kappa_per_label,
    kappa_f1,
    weighted_f1,
)

sk_metrics = pytest.importorskip("sklearn.metrics")
sm_irr = pytest.importorskip("statsmodels.stats.inter_rater")


@pytest.mark.parametrize("seed", range(5))
def test_fleiss_kappa_matches_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_items, n_cats, m = 40, 4, 6
    probs = rng.dirichlet(np.ones(n_cats) * 0.7, size=n_items)
    table = np.array([rng.multinomial(m, p) for p in probs])
    ours = fleiss_kappa(table)
    assert ours.value == pytest.approx(sm_irr.fleiss_kappa(table, method="fleiss"), abs=1e-9)


def test_fleiss_kappa_per_label_matches_statsmodels() -> None:
    rng = np.random.default_rng(2)
    n_items, runs, labels = 50, 5, 11
    prevalence = rng.uniform(0.05, 0.6, size=(n_items, 1, labels))
    indicators = rng.random((n_items, runs, labels)) < prevalence
    indicators[:, :, 3] = False  # a label nobody ever assigns: kappa undefined
    res = fleiss_kappa_per_label(indicators)
    assert res.values.shape == (labels,)
    for lab in range(labels):
        if lab == 3:
            assert math.isnan(res.values[lab]) and res.reasons[lab]
            continue
        present = indicators[:, :, lab].sum(axis=1)
        table = np.column_stack([present, runs - present])
        ref = sm_irr.fleiss_kappa(table, method="fleiss")
        assert res.values[lab] == pytest.approx(ref, abs=1e-9)
        assert res.reasons[lab] is None


def test_fleiss_kappa_degenerate() -> None:
    assert "different numbers" in fleiss_kappa([[2, 1], [1, 1]]).reason
    assert "≥ 2 raters" in fleiss_kappa([[1, 0], [0, 1]]).reason
    assert math.isnan(fleiss_kappa([[3, 0], [3, 0]]).value)


@pytest.mark.parametrize("seed", range(3))
def test_weighted_f1_matches_sklearn_multiclass(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y_true = rng.choice(["a", "b", "c", "d"], size=200, p=[0.5, 0.3, 0.15, 0.05])
    y_pred = np.where(rng.random(200) < 0.6, y_true, rng.choice(["a", "b", "c", "e"], 200))
    ref = sk_metrics.f1_score(y_true, y_pred, average="weighted", zero_division=0)
    assert weighted_f1(y_true, y_pred).value == pytest.approx(ref, abs=1e-12)


def test_weighted_f1_matches_sklearn_multilabel() -> None:
    rng = np.random.default_rng(4)
    y_true = (rng.random((150, 6)) < 0.3).astype(int)
    y_pred = np.where(rng.random((150, 6)) < 0.7, y_true, 1 - y_true)
    ref = sk_metrics.f1_score(y_true, y_pred, average="weighted", zero_division=0)
    assert weighted_f1(y_true, y_pred).value == pytest.approx(ref, abs=1e-12)


def test_f1_random_baseline_is_sum_of_squared_proportions() -> None:
    y_true = np.array(["A"] * 50 + ["B"] * 30 + ["C"] * 20)
    assert f1_random_baseline(y_true).value == pytest.approx(0.5**2 + 0.3**2 + 0.2**2)


def test_f1_random_baseline_matches_simulated_random_assignment() -> None:
    # §5.2's claim, checked the way the paper checked it: simulate random predictions.
    rng = np.random.default_rng(0)
    y_true = rng.choice(3, size=200_000, p=[0.6, 0.3, 0.1])
    y_pred = rng.choice(3, size=y_true.size, p=np.bincount(y_true) / y_true.size)
    simulated = sk_metrics.f1_score(y_true, y_pred, average="weighted")
    assert f1_random_baseline(y_true).value == pytest.approx(simulated, abs=0.005)


def test_kappa_f1() -> None:
    assert kappa_f1(0.69, 0.38).value == pytest.approx((0.69 - 0.38) / 0.62)
    assert kappa_f1(0.38, 0.38).value == 0.0
    assert math.isnan(kappa_f1(0.9, 1.0).value)
    assert f1_random_baseline([]).reason == "no items"
