"""analysis.betting: the hedged-capital interval of a bounded mean (Waudby-Smith & Ramdas)."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.betting import betting_ci, betting_ci_cells

SPREAD = np.array([3, 4, 2, 5, 4, 3, 3, 4, 1, 5, 4, 4, 2, 3, 5, 4, 3, 4, 4, 2, 5, 3, 4, 4, 3, 1, 4,
                   5, 3, 4], float)  # fmt: skip
SKEWED = np.array([5] * 46 + [4, 4, 3, 1], float)
CONSTANT = np.full(20, 5.0)


@pytest.mark.parametrize(
    ("sample", "expected"),
    [(SPREAD, (2.8472, 3.8888)), (SKEWED, (4.2928, 5.0)), (CONSTANT, (3.8464, 5.0))],
)
def test_equals_confseq_on_the_same_order(sample, expected):
    """The values of confseq 0.0.11's ``betting_ci`` (hedged capital, θ = ½, truncation ½ of the
    candidate mean, running intersection, a grid of 10,000 on the 1–5 scale) on the same
    seeded order, computed once: confseq does not build on Python 3.11 here. Its grid widens
    each end by one step (0.0004), hence the tolerance."""
    low, high = betting_ci(sample, lo=1, hi=5, seed=0)
    assert (low, high) == pytest.approx(expected, abs=1e-3)


def test_covers_at_least_the_nominal_level_on_skewed_and_spread_scores():
    """Its coverage holds for any distribution on the scale and any n (Ville's inequality):
    1,000 seeded samples of 30 from a distribution with 96 % fives, and from a spread one."""
    rng = np.random.default_rng(0)
    for probs in ([0.01, 0.01, 0.0, 0.02, 0.96], [0.1, 0.2, 0.3, 0.25, 0.15]):
        truth = float(np.dot(np.arange(1, 6), probs))
        values = rng.choice(np.arange(1, 6), size=(1000, 30), p=probs).astype(float)
        cells = np.repeat(np.arange(1000), 30)
        low, high = betting_ci_cells(values.ravel(), cells, 1000, lo=1, hi=5, seed=1)
        assert np.mean((low <= truth) & (truth <= high)) >= 0.95


def test_cells_at_once_equal_one_at_a_time_and_empty_cells_are_nan():
    values = np.concatenate([SPREAD, SKEWED])
    cells = np.concatenate([np.zeros(SPREAD.size, int), np.full(SKEWED.size, 2)])
    low, high = betting_ci_cells(values, cells, 3, lo=1, hi=5, seed=4)
    assert np.isnan(low[1]) and np.isnan(high[1])
    # Each cell's observations take their own seeded order, so compare widths, not bits.
    assert low[0] < SPREAD.mean() < high[0] and low[2] < SKEWED.mean() <= high[2]


def test_values_outside_the_scale_are_refused():
    with pytest.raises(ValueError, match=r"lie in \[1, 5\]"):
        betting_ci(np.array([0.0, 3.0]), lo=1, hi=5)
