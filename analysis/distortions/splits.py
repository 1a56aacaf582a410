"""The 70:15:15 train/dev/test split stratified on the (dominant) label  [CD §4.2]."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

SPLITS: tuple[str, ...] = ("train", "dev", "test")


def _stratum(item: str | Sequence[str] | None) -> str:
    if item is None:
        return ""
    if isinstance(item, str):
        return item
    return next(iter(item), "")


def stratified_split(
    labels_per_item: Sequence[str | Sequence[str] | None],
    *,
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
) -> list[str]:
    """ "train"/"dev"/"test" per item, stratified on the (dominant) label [CD §4.2].

    §4.2: "split into train, development, and test sets using a 70:15:15 ratio, with
    stratification based on the GOLDEN LABELS". The stratum of an item is its label, or the
    first of its labels (the dominant one); an item without labels forms its own stratum "".

    Allocation: within a stratum of m items each split gets ⌊m·f⌋ or ⌈m·f⌉ items (so never
    more than one item off its share); the rounded-up slots go to the splits furthest behind
    their running global share, so the global proportions also stay within about one item.
    Which items go where: a seeded shuffle within each stratum; the same seed and input give
    the same split (§4.2 keeps one split fixed across all label settings).
    """
    f = np.asarray(fractions, dtype=float)
    if f.shape != (3,) or np.any(f < 0) or not math.isclose(f.sum(), 1.0, abs_tol=1e-9):
        raise ValueError(f"fractions must be three non-negative numbers summing to 1: {fractions}")
    rng = np.random.default_rng(seed)
    strata: dict[str, list[int]] = {}
    for i, item in enumerate(labels_per_item):
        strata.setdefault(_stratum(item), []).append(i)
    out = [""] * len(labels_per_item)
    assigned = np.zeros(3)
    seen = 0
    for key in sorted(strata):  # sorted: the result must not depend on dict order
        members = np.asarray(strata[key])
        m = members.size
        share = m * f
        counts = np.floor(share + 1e-9).astype(int)
        extra = m - counts.sum()
        if extra:
            # Only splits with a fractional share may round up (keeps |count − m·f| < 1);
            # among those, the ones furthest behind globally go first; ties by split order.
            deficit = (seen + m) * f - (assigned + counts)
            candidates = [s for s in range(3) if share[s] - counts[s] > 1e-9]
            candidates.sort(key=lambda s: (-deficit[s], s))
            for s in candidates[:extra]:
                counts[s] += 1
        order = members[rng.permutation(m)]
        bounds = np.cumsum(counts)
        for s, chunk in enumerate(np.split(order, bounds[:-1])):
            for i in chunk:
                out[int(i)] = SPLITS[s]
        assigned += counts
        seen += m
    return out
