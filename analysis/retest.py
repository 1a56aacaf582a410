"""Test-retest agreement and drift from the consensus: pure functions on arrays.

Test-retest: one clinician's first and repeat score of the same response and attribute,
compared with quadratic weighted kappa (stats.weighted_kappa, sklearn's convention) and the
share of identical scores. Drift: over the conversations a clinician submitted, in order, the
mean absolute difference between their score and the mean of the other clinicians' scores of the
same response and attribute, per block of conversations; a rising line is a rater drifting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from analysis import stats


@dataclass(frozen=True)
class RetestAgreement:
    pairs: int
    kappa: stats.Estimate
    exact: float  # share of identical scores (NaN without pairs)
    mean_abs_diff: float


def retest_agreement(
    first: ArrayLike, repeat: ArrayLike, *, labels: Sequence[float]
) -> RetestAgreement:
    a = np.asarray(first, dtype=np.float64)
    b = np.asarray(repeat, dtype=np.float64)
    if a.size == 0:
        return RetestAgreement(
            0, stats.Estimate(math.nan, "no repeat rated yet"), math.nan, math.nan
        )
    return RetestAgreement(
        pairs=int(a.size),
        kappa=stats.weighted_kappa(a, b, weights="quadratic", labels=labels),
        exact=float(np.mean(a == b)),
        mean_abs_diff=float(np.mean(np.abs(a - b))),
    )


@dataclass(frozen=True)
class DriftBlock:
    first: int  # 1-based position of the block's first conversation in submission order
    last: int
    scores: int
    mean_abs_diff: float


def consensus_drift(
    order: ArrayLike, own: ArrayLike, consensus: ArrayLike, *, block: int
) -> list[DriftBlock]:
    """Mean |own − consensus| per block of `block` conversations; `order` is each score's
    conversation position (0-based) in the clinician's submission order."""
    order = np.asarray(order, dtype=np.int64)
    diff = np.abs(np.asarray(own, dtype=np.float64) - np.asarray(consensus, dtype=np.float64))
    if order.size == 0:
        return []
    which = order // block
    blocks = np.unique(which)
    sums = np.bincount(which, weights=diff)
    counts = np.bincount(which)
    return [
        DriftBlock(
            first=int(b * block + 1),
            last=int((b + 1) * block),
            scores=int(counts[b]),
            mean_abs_diff=float(sums[b] / counts[b]),
        )
        for b in blocks
    ]
