"""Confidence intervals for the mean of bounded scores by betting (pure numpy).

Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting", JRSS-B 86(1),
2024: the *hedged capital* interval. For scores known to lie in [lo, hi] (a 1–5 rubric), scale
them to x_i ∈ [0, 1]. For a candidate mean m, a gambler who bets that the mean is above m
multiplies their capital by 1 + λ⁺_t (x_t − m) at each observation, one who bets below by
1 − λ⁻_t (x_t − m); when m is the true mean both capitals are nonnegative martingales, so by
Ville's inequality the hedged capital max(½K⁺_t, ½K⁻_t) reaches 1/α with probability at most α
at any time. The interval is every m whose hedged capital never reached 1/α:

    λ_t = sqrt(2 log(2/α) / (n σ̂²_{t−1})),  σ̂²_t = (¼ + Σ_{i≤t} (x_i − μ̂_i)²) / (t + 1),
    μ̂_t = (½ + Σ_{i≤t} x_i) / (t + 1),
    λ⁺_t = min(λ_t, c/m),  λ⁻_t = min(λ_t, c/(1 − m)),  c = ½ (the paper's truncation).

Its coverage is at least 1 − α for every distribution on [lo, hi] and every n: no normal
approximation, so a sample of a hundred Safety scores of which 96 are fives is covered as well as
a spread one (where the Student-t interval covers 0.85–0.89), and a sample with no spread at all
still gets an interval of honest width. The price is a somewhat wider interval on well-spread
data (docs/judge-assisted.md gives the measured ratio).

The capital depends on the order of the observations; they are taken in a seeded random order
(``seed``), so the same data gives the same interval. The endpoints are found by bisection (the
accepted means form an interval), every cell at once.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

#: The truncation of the bets (c): ½ as in the paper's hedged capital interval.
TRUNCATION = 0.5
#: Bisection steps: 2⁻⁴⁰ of the scale, far below any score's precision.
_STEPS = 40


def _bets(x: FloatArray, mask: FloatArray, n: FloatArray, alpha: float) -> FloatArray:
    """λ_t per cell (rows) and time (columns), predictable: from observations before t."""
    t = np.arange(1, x.shape[1] + 1, dtype=np.float64)
    mu = (0.5 + np.cumsum(x * mask, axis=1)) / (t + 1.0)
    sigma2 = (0.25 + np.cumsum(((x - mu) ** 2) * mask, axis=1)) / (t + 1.0)
    prev = np.concatenate([np.full((x.shape[0], 1), 0.25), sigma2[:, :-1]], axis=1)
    with np.errstate(divide="ignore"):
        return np.asarray(
            np.sqrt(2.0 * math.log(2.0 / alpha) / (n[:, None] * prev)), dtype=np.float64
        )


def _rejected(
    x: FloatArray, mask: FloatArray, lam: FloatArray, m: FloatArray, alpha: float
) -> NDArray[np.bool_]:
    """Per cell: did the hedged capital against mean m[cell] ever reach 1/α?"""
    mm = m[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.minimum(lam, TRUNCATION / mm)
        down = np.minimum(lam, TRUNCATION / (1.0 - mm))
        # Padded positions (mask 0) multiply the capital by 1.
        log_up = np.cumsum(np.log1p(up * (x - mm) * mask), axis=1)
        log_down = np.cumsum(np.log1p(-down * (x - mm) * mask), axis=1)
    hedged = np.maximum(log_up, log_down) + math.log(0.5)
    return np.asarray(np.nanmax(hedged, axis=1) >= math.log(1.0 / alpha))


def betting_ci_cells(
    values: ArrayLike,
    cell: ArrayLike,
    n_cells: int,
    *,
    lo: float,
    hi: float,
    alpha: float = 0.05,
    seed: int = 0,
) -> tuple[FloatArray, FloatArray]:
    """The hedged-capital interval of each cell's mean (see the module doc).

    ``values`` lie in [lo, hi], ``cell`` codes them 0..n_cells−1. Returns (low, high) per cell;
    NaN where a cell has no observation. Raises ValueError for values outside [lo, hi].
    """
    x_all = np.asarray(values, dtype=np.float64).ravel()
    codes = np.asarray(cell, dtype=np.int64).ravel()
    if not hi > lo:
        raise ValueError(f"need lo < hi, got [{lo}, {hi}]")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha}")
    if x_all.size and (
        not np.all(np.isfinite(x_all)) or x_all.min() < lo - 1e-9 or x_all.max() > hi + 1e-9
    ):
        raise ValueError(f"values must be finite and lie in [{lo}, {hi}]")
    x_all = np.clip((x_all - lo) / (hi - lo), 0.0, 1.0)
    counts = np.bincount(codes, minlength=n_cells)
    width = int(counts.max()) if counts.size else 0
    low, high = np.full(n_cells, np.nan), np.full(n_cells, np.nan)
    if width == 0:
        return low, high
    # A seeded random order within each cell, then one padded row per cell.
    order = np.lexsort((np.random.default_rng(seed).random(x_all.size), codes))
    codes, x_sorted = codes[order], x_all[order]
    starts = np.cumsum(counts) - counts
    pos = np.arange(codes.size) - starts[codes]
    x = np.zeros((n_cells, width))
    mask = np.zeros((n_cells, width))
    x[codes, pos] = x_sorted
    mask[codes, pos] = 1.0
    n = counts.astype(np.float64)
    lam = _bets(x, mask, np.maximum(n, 1.0), alpha)
    mean = np.where(n > 0, (x * mask).sum(axis=1) / np.maximum(n, 1.0), 0.5)
    # Lower endpoint: the smallest accepted m in [0, mean]; upper: the largest in [mean, 1].
    a, b = np.zeros(n_cells), mean.copy()
    for _ in range(_STEPS):
        mid = (a + b) / 2.0
        rej = _rejected(x, mask, lam, mid, alpha)
        a, b = np.where(rej, mid, a), np.where(rej, b, mid)
    lower = b
    a, b = mean.copy(), np.ones(n_cells)
    for _ in range(_STEPS):
        mid = (a + b) / 2.0
        rej = _rejected(x, mask, lam, mid, alpha)
        a, b = np.where(rej, a, mid), np.where(rej, mid, b)
    upper = a
    have = n > 0
    low[have] = lo + (hi - lo) * lower[have]
    high[have] = lo + (hi - lo) * upper[have]
    return low, high


def betting_ci(
    values: ArrayLike, *, lo: float, hi: float, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """The hedged-capital interval of one sample's mean; (NaN, NaN) when it is empty."""
    x = np.asarray(values, dtype=np.float64).ravel()
    low, high = betting_ci_cells(x, np.zeros(x.size, dtype=np.int64), 1, lo=lo, hi=hi,
                                 alpha=alpha, seed=seed)  # fmt: skip
    return float(low[0]), float(high[0])
