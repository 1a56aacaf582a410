"""How consistent repeated runs are: maximum label repetition (Figure 2) and per-label Fleiss'
kappa across runs (Tables 2 and 7)  [CD §3.3, §3.4, Appendix F]."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from analysis.distortions.agreement import fleiss_kappa_per_label
from analysis.distortions.labels import LabelSpec, Run, check_runs, label_names, runs_matrix
from scoring.distortions import OTHERS

# --------------------------------------------------------------------------------------------
# Figure 2 — maximum label repetition  [CD §3.3]
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepetitionDistribution:
    """Per item, the most runs that agreed on one label, and its distribution (Figure 2).

    ``counts[r]``/``proportions[r]``: items whose maximum repetition is exactly r (r = 0..N);
    ``at_least[r]``: share of items with some label repeated r or more times (§3.3: "at least
    84% of data points have at least one label repeated four or more times").
    """

    max_counts: NDArray[np.int64]
    n_runs: int
    counts: dict[int, int]
    proportions: dict[int, float]
    at_least: dict[int, float]

    def as_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "items": pd.Series(self.counts),
                "proportion": pd.Series(self.proportions),
                "at_least": pd.Series(self.at_least),
            }
        ).rename_axis("max_repetition")


def max_repetition_distribution(
    runs_by_item: Sequence[Sequence[Run]],
    *,
    basis: Literal["any", "dominant"] = "any",
) -> RepetitionDistribution:
    """Distribution of the maximum number of runs that produced the same label [CD §3.3, Fig. 2].

    §3.3: "Figure 2 plots the proportion of data points having at least one label repeated a
    given number of times". With ``basis="any"`` (the paper's wording, used for both prompts) a
    label counts in a run wherever it appears in it — the same counting as Appendix G's "appear
    at least four times across five runs". ``basis="dominant"`` counts only each run's first
    label, i.e. how stable the RLP's dominant choice is (and, for single-label runs, the same
    number). "Others" counts as one label, as everywhere in the paper; a failed run (None)
    contributes nothing, so r stays out of N runs.
    """
    if basis not in ("any", "dominant"):
        raise ValueError(f"basis must be 'any' or 'dominant', got {basis!r}")
    items = [
        check_runs(runs, allowed=None, scheme=None, where=f"item {i}")
        for i, runs in enumerate(runs_by_item)
    ]
    if not items:
        raise ValueError("no items")
    n_runs = max(len(runs) for runs in items)
    maxima = np.zeros(len(items), dtype=np.int64)
    for i, runs in enumerate(items):
        votes: Counter[str] = Counter()
        for run in runs:
            if run:
                votes.update(run[:1] if basis == "dominant" else run)
        maxima[i] = max(votes.values(), default=0)
    tally = np.bincount(maxima, minlength=n_runs + 1)
    total = len(items)
    counts = {r: int(tally[r]) for r in range(n_runs + 1)}
    at_least = {r: float(tally[r:].sum() / total) for r in range(n_runs + 1)}
    return RepetitionDistribution(
        maxima, n_runs, counts, {r: c / total for r, c in counts.items()}, at_least
    )


# --------------------------------------------------------------------------------------------
# Tables 2 and 7 — per-label Fleiss' kappa across runs  [CD §3.4, Appendix F]
# --------------------------------------------------------------------------------------------


def label_indicators(
    runs_by_item: Sequence[Sequence[Run]], *, labels: LabelSpec | None = None
) -> tuple[NDArray[np.int8], NDArray[np.bool_]]:
    """(indicators, complete): 0/1 array (items, runs, labels) and which items had no failed run.

    Appendix F, Step 1: x = 1 "if label j is present in iteration i". A label counts wherever
    it appears in a run (dominant or secondary for the RLP). Labels in the runs but outside
    ``labels`` ("Others" by default) get no column. Failed runs are all-zero rows; use
    ``complete`` to drop their items.
    """
    names = label_names(labels)
    checked, n_runs = runs_matrix(runs_by_item, allowed=set(names) | {OTHERS})
    col = {name: j for j, name in enumerate(names)}
    x = np.zeros((len(checked), n_runs, len(names)), dtype=np.int8)
    complete = np.ones(len(checked), dtype=bool)
    for i, runs in enumerate(checked):
        for r, run in enumerate(runs):
            if run is None:
                complete[i] = False
                continue
            for lab in run:
                if lab in col:
                    x[i, r, col[lab]] = 1
    return x, complete


@dataclass(frozen=True)
class PerLabelFleiss:
    """Per-label Fleiss' kappa over N runs and its plain mean over the defined labels."""

    labels: list[str]
    kappas: dict[str, float]
    reasons: dict[str, str | None]
    average: float
    n_items: int
    n_dropped: int  # items with a failed run (Fleiss needs the same N raters per item)

    def as_series(self) -> pd.Series:
        return pd.Series({**self.kappas, "Average": self.average}, name="fleiss_kappa")


def per_label_fleiss(
    runs_by_item: Sequence[Sequence[Run]], *, labels: LabelSpec | None = None
) -> PerLabelFleiss:
    """Fleiss' kappa per label (present/absent across the N runs) and the average [CD §3.4].

    §3.4: "we treat each label as a separate binary task (present vs absent), and calculate
    Fleiss' kappa scores per label"; Table 2 reports them "averaged over the 11 CD labels
    considered" (the default ``labels``; "Others" is not among them). The average is the plain
    mean of Table 7's column (checked against Table 7 in the tests); a label with undefined
    kappa (never or always assigned) is left out of it and its reason kept.
    """
    names = label_names(labels)
    x, complete = label_indicators(runs_by_item, labels=names)
    kept = x[complete]
    result = fleiss_kappa_per_label(kept)
    kappas = {name: float(v) for name, v in zip(names, result.values, strict=True)}
    reasons = dict(zip(names, result.reasons, strict=True))
    defined = [v for v in kappas.values() if math.isfinite(v)]
    average = float(np.mean(defined)) if defined else math.nan
    return PerLabelFleiss(
        names, kappas, reasons, average, int(kept.shape[0]), int((~complete).sum())
    )


def fleiss_table(results: Mapping[str, PerLabelFleiss]) -> pd.DataFrame:
    """Table 7 layout: one row per label plus "Average", one column per configuration."""
    return pd.DataFrame({config: res.as_series() for config, res in results.items()})
