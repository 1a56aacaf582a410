"""Label agreement statistics: Fleiss' kappa (per label across runs), support-weighted F1, its
random baseline and κ_F1, and Cohen's kappa per label between two raters.

Pure functions on numpy arrays. References: [CD] §3.4 and Appendix F (Fleiss' kappa per label),
§5.2–5.3 (chance-corrected weighted F1, κ_F1); Fleiss (1971); Cohen (1960). Degenerate input
returns NaN with a reason, as in analysis.stats; only a wrongly shaped argument raises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from analysis.stats import Estimate, FloatArray


@dataclass(frozen=True, slots=True)
class LabelKappas:
    """Per-label Fleiss' kappa; ``reasons[i]`` explains a NaN in ``values[i]``."""

    values: FloatArray
    reasons: tuple[str | None, ...] = field(default_factory=tuple)


def _fleiss_from_counts(counts: FloatArray) -> tuple[FloatArray, list[str | None]]:
    """Fleiss' kappa for a stack of (N, K) count tables: counts has shape (L, N, K)."""
    n_items = counts.shape[1]
    per_item = counts.sum(axis=2)  # (L, N) raters per item
    m = per_item[:, 0] if n_items else np.zeros(counts.shape[0])
    reasons: list[str | None] = []
    values = np.full(counts.shape[0], np.nan)
    for lab in range(counts.shape[0]):
        if n_items == 0:
            reasons.append("no items")
        elif not np.all(per_item[lab] == m[lab]):
            reasons.append("items have different numbers of raters")
        elif m[lab] < 2:
            reasons.append(f"need ≥ 2 raters per item, got {m[lab]:g}")
        else:
            reasons.append(None)
    ok = np.array([r is None for r in reasons])
    if ok.any():
        c = counts[ok]
        mm = m[ok][:, None]
        p_cat = c.sum(axis=1) / (n_items * mm)  # (L', K)
        p_item = ((c**2).sum(axis=2) - mm) / (mm * (mm - 1))  # (L', N)
        p_bar = p_item.mean(axis=1)
        p_e = (p_cat**2).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            kap = np.where(p_e < 1.0 - 1e-12, (p_bar - p_e) / (1.0 - p_e), np.nan)
        values[ok] = kap
        for pos, lab in enumerate(np.flatnonzero(ok).tolist()):
            if np.isnan(kap[pos]):
                reasons[lab] = "every rating falls in one category: kappa undefined"
    return values, reasons


def fleiss_kappa(table: ArrayLike) -> Estimate:
    """Fleiss' kappa for an items × categories table of counts (each row sums to m raters).

    κ = (P̄ − P_e) / (1 − P_e), P_i = (Σ_c n_ic² − m) / (m(m − 1)), P̄ = mean P_i,
    P_e = Σ_c p_c², p_c = Σ_i n_ic / (N m)  [CD Appendix F; Fleiss 1971].
    """
    arr = np.asarray(table, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"expected an (items, categories) table, got shape {arr.shape}")
    values, reasons = _fleiss_from_counts(arr[None])
    return Estimate(float(values[0]), reasons[0])


def fleiss_kappa_per_label(indicators: ArrayLike) -> LabelKappas:
    """Per-label Fleiss' kappa across repeated runs, each label as present/absent [CD §3.4].

    Args:
        indicators: boolean/0-1 array (N items, M runs, L labels): label l assigned to item i
            in run m. Each label becomes an N×2 table [present count, absent count].
    """
    arr = np.asarray(indicators, dtype=np.float64)
    if arr.ndim != 3:
        raise ValueError(f"expected (items, runs, labels), got shape {arr.shape}")
    runs = arr.shape[1]
    present = arr.sum(axis=1).T  # (L, N)
    counts = np.stack([present, runs - present], axis=2)  # (L, N, 2)
    values, reasons = _fleiss_from_counts(counts)
    return LabelKappas(values, tuple(reasons))


def weighted_f1(
    y_true: ArrayLike, y_pred: ArrayLike, *, labels: ArrayLike | None = None
) -> Estimate:
    """Support-weighted F1 (sklearn ``average="weighted"``), multiclass or multilabel.

    1-D inputs are class labels; 2-D inputs are (items, labels) 0/1 indicator matrices. Per
    class F1 = 2·TP / (2·TP + FP + FN) (0 when undefined), weighted by the class's true
    support. ``labels`` restricts/orders the classes (multiclass only).
    """
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.shape != p.shape:
        raise ValueError(f"shapes differ: {t.shape} vs {p.shape}")
    if t.size == 0:
        return Estimate(math.nan, "no items")
    if t.ndim == 2:
        tb, pb = t.astype(bool), p.astype(bool)
        tp = (tb & pb).sum(axis=0)
        fp = (~tb & pb).sum(axis=0)
        fn = (tb & ~pb).sum(axis=0)
    elif t.ndim == 1:
        classes = np.unique(np.concatenate([t, p])) if labels is None else np.asarray(labels)
        tm = t[:, None] == classes[None, :]
        pm = p[:, None] == classes[None, :]
        tp = (tm & pm).sum(axis=0)
        fp = (~tm & pm).sum(axis=0)
        fn = (tm & ~pm).sum(axis=0)
    else:
        raise ValueError(f"expected 1-D labels or a 2-D indicator matrix, got {t.ndim}-D")
    support = tp + fn
    if support.sum() == 0:
        return Estimate(math.nan, "no true labels: weights undefined")
    den = 2 * tp + fp + fn
    f1 = np.divide(2.0 * tp, den, out=np.zeros(den.shape), where=den > 0)
    return Estimate(float(np.sum(f1 * support) / support.sum()))


def f1_random_baseline(y_true: ArrayLike) -> Estimate:
    """Weighted F1 of random assignment following the true class distribution [CD §5.2].

    With class proportions p_c, precision = recall = F1 = p_c for class c, so the weighted F1
    is Σ_c p_c · p_c = Σ_c p_c² (the paper's a² + b² + c² for three classes).
    """
    t = np.asarray(y_true).ravel()
    if t.size == 0:
        return Estimate(math.nan, "no items")
    _, counts = np.unique(t, return_counts=True)
    p = counts / counts.sum()
    return Estimate(float(np.sum(p**2)))


def kappa_f1(f1: float, f1_random: float) -> Estimate:
    """κ_F1 = (F1 − F1_random) / (1 − F1_random)  [CD §5.3]; 0 = chance, 1 = perfect."""
    if not (np.isfinite(f1) and np.isfinite(f1_random)):
        return Estimate(math.nan, "F1 or F1_random is undefined")
    if f1_random >= 1.0:
        return Estimate(math.nan, "a single class: F1_random = 1, kappa undefined")
    return Estimate((f1 - f1_random) / (1.0 - f1_random))


def cohen_kappa_binary(
    a: ArrayLike, b: ArrayLike
) -> tuple[FloatArray, FloatArray, list[str | None]]:
    """(kappa, percent agreement, reasons) per column of two (items, labels) 0/1 matrices.

    Cohen (1960): κ = (p_o − p_e) / (1 − p_e) with p_o the share of items on which the two
    agree (present/absent) and p_e = p_a·p_b + (1 − p_a)(1 − p_b) from each rater's prevalence.
    Vectorised over labels; NaN with a reason where p_e = 1 (both raters constant and equal).
    """
    x = np.asarray(a, dtype=bool)
    y = np.asarray(b, dtype=bool)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(
            f"need two (items, labels) matrices of one shape, got {x.shape}, {y.shape}"
        )
    if x.shape[0] == 0:
        nan = np.full(x.shape[1], np.nan)
        return nan, nan.copy(), ["no items"] * x.shape[1]
    p_o = (x == y).mean(axis=0)
    pa, pb = x.mean(axis=0), y.mean(axis=0)
    p_e = pa * pb + (1 - pa) * (1 - pb)
    with np.errstate(divide="ignore", invalid="ignore"):
        kappa = np.where(p_e < 1.0 - 1e-12, (p_o - p_e) / (1.0 - p_e), np.nan)
    reasons = [
        "both raters gave the same answer for every item: kappa undefined" if np.isnan(v) else None
        for v in kappa
    ]
    return kappa, p_o, reasons
