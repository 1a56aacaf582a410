"""Cognitive-distortion labelling with repeated LLM runs: consistency, consensus, evaluation.

Pure functions on plain Python / numpy / pandas (docs/architecture.md); no Django. The reference is
cognitive_distortions_paper.txt ([CD]):

- §3.3, Figure 2 — maximum label repetition across the N runs of an item.
- §3.4, Appendix F, Tables 2 and 7 — per-label Fleiss' kappa across runs and its average.
- §4.1, Appendix G, Table 8 — final labels (≥ k of N runs, the two "not sure" fallbacks and the
  "Others" rule) and their distribution per configuration.
- §4.2 — 70:15:15 split stratified on the (dominant) label; removal of ambiguous items.
- §5.2–5.3, Appendix J, Table 10 — F1_random, κ_F1 and the simulated random baseline.

Conventions: a *run* is the list of canonical labels one LLM call produced (what
scoring.label_parsing.parse_label_output returns in ``labels``: Table 1 names, "No Distortion",
or "Others"), ranked for the RLP; ``None`` stands for a failed run (unparseable output). Runs of
an item are a list of runs; ``runs_by_item`` is a list of those.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal, TypedDict, cast

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from analysis import stats
from scoring.distortions import DEFAULT_DISTORTIONS, NO_DISTORTION, OTHERS

FloatArray = NDArray[np.float64]
Scheme = Literal["ranked", "multi"]
Kind = Literal["binary", "multiclass", "multilabel"]
Run = Sequence[str] | None
LabelSpec = Sequence[Mapping[str, str] | str]

#: Appendix G fallback categories, spelled as in the paper's text and Table 8.
NOT_SURE_IF_DISTORTION = "not sure if distortion"
NOT_SURE_WHICH_DISTORTION = "not sure which distortion"
#: "special categories to indicate annotation ambiguity" [CD §4.1]; §4.2 drops these items.
AMBIGUOUS_LABELS: tuple[str, ...] = (NOT_SURE_IF_DISTORTION, NOT_SURE_WHICH_DISTORTION)

#: §4.1: "we prioritize labels that recur in at least 4 out of 5 runs".
DEFAULT_K = 4
DEFAULT_N = 5

SPLITS: tuple[str, ...] = ("train", "dev", "test")


def label_names(labels: LabelSpec | None = None) -> list[str]:
    """Canonical names of a label set (dicts with ``name`` or plain strings).

    Default: the 11 labels of Table 1 (10 distortions + "No Distortion"), the set over which
    Tables 2 and 7 average Fleiss' kappa.
    """
    spec = DEFAULT_DISTORTIONS if labels is None else labels
    names = [(e if isinstance(e, str) else str(e.get("name") or "")).strip() for e in spec]
    if not names or not all(names):
        raise ValueError("the label set is empty or has a label without a name")
    if len(set(names)) != len(names):
        raise ValueError("the label set names a label twice")
    return names


def _check_runs(
    runs: Sequence[Run], *, allowed: set[str] | None, scheme: Scheme | None, where: str
) -> list[list[str] | None]:
    """Runs deduplicated within each run (order kept), after checking every label is known.

    A label outside the label set (and not "Others") means the caller skipped the parser, so it
    is an error here rather than a silent extra category.
    """
    out: list[list[str] | None] = []
    for r, run in enumerate(runs):
        if run is None:
            out.append(None)
            continue
        if isinstance(run, str):
            raise ValueError(f"{where}, run {r}: a run is a list of labels, got the string {run!r}")
        labs = list(dict.fromkeys(run))
        unknown = [lab for lab in labs if allowed is not None and lab not in allowed]
        if unknown:
            raise ValueError(f"{where}, run {r}: unknown label(s) {unknown}")
        if scheme == "ranked" and len(labs) > 2:
            raise ValueError(f"{where}, run {r}: the ranked scheme allows ≤ 2 labels, got {labs}")
        out.append(labs)
    return out


def _runs_matrix(
    runs_by_item: Sequence[Sequence[Run]], *, allowed: set[str], scheme: Scheme | None = None
) -> tuple[list[list[list[str] | None]], int]:
    if len(runs_by_item) == 0:
        raise ValueError("no items")
    checked = [
        _check_runs(runs, allowed=allowed, scheme=scheme, where=f"item {i}")
        for i, runs in enumerate(runs_by_item)
    ]
    lengths = {len(runs) for runs in checked}
    if len(lengths) != 1:
        raise ValueError(f"items have different numbers of runs: {sorted(lengths)}")
    return checked, lengths.pop()


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
        _check_runs(runs, allowed=None, scheme=None, where=f"item {i}")
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
    checked, n_runs = _runs_matrix(runs_by_item, allowed=set(names) | {OTHERS})
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
    result = stats.fleiss_kappa_per_label(kept)
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


# --------------------------------------------------------------------------------------------
# Final labels — Appendix G
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Consensus:
    """The final label(s) of one item [CD §4.1, Appendix G].

    ``rule``: "threshold" (labels in ≥ k runs), "not sure if distortion", "not sure which
    distortion", or "no valid runs" (every run failed: the paper's rules do not apply).
    ``counts``: runs per label after the "Others" rule; ``first``: runs that ranked it first.
    """

    labels: list[str]
    rule: str
    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)
    n_runs: int = 0
    n_valid_runs: int = 0

    @property
    def ambiguous(self) -> bool:
        """True for the §4.1 special categories (and for an item with no valid run)."""
        return self.rule != "threshold"

    @property
    def dominant(self) -> str | None:
        return self.labels[0] if self.labels else None


def _apply_others_rule(run: list[str]) -> list[str]:
    # Appendix G: "most of the time in runs, 'Others' was accompanied by at least one CD label
    # from the given list. In such cases, it was simply ignored and further processing was done
    # based on the remaining labels. The 'Others' label was retained only in cases where it was
    # not accompanied by any other CD label." — applied per run ("in runs"), before counting.
    # "No Distortion" is one of the given labels (Table 1: "the 11th category"), so it also
    # makes an accompanying "Others" drop (the parser never produces that pair anyway).
    if OTHERS in run and any(lab != OTHERS for lab in run):
        return [lab for lab in run if lab != OTHERS]
    return run


class _ConsensusCounts(TypedDict):
    """The counts every Consensus of consensus_labels carries."""

    counts: dict[str, int]
    first: dict[str, int]
    n_runs: int
    n_valid_runs: int


def consensus_labels(
    runs_for_item: Sequence[Run],
    *,
    k: int = DEFAULT_K,
    n: int = DEFAULT_N,
    labels: LabelSpec | None = None,
    scheme: Scheme = "multi",
) -> Consensus:
    """Final labels of one item from its N runs, exactly as Appendix G describes.

    1. "Others" rule (per run): "Others" is dropped from a run that also has a listed label,
       kept when alone.
    2. Threshold: "we selected only those labels that appear at least four times across five
       runs" — every label present in ≥ k of the n runs (k=4, n=5 by default; k=3 gives the
       "traditional" majority vote of §4.1). A label counts once per run, in any position.
    3. If no label reaches k: "If none of the labels met the threshold but 'No Distortion'
       appeared in at least one run, we labeled the instance as 'not sure if distortion'";
    4. otherwise "if the labels were too diverse without reaching any consensus and 'No
       Distortion' was absent, we marked it as 'not sure which distortion'".

    Order of the final labels (the paper does not say; it matters for the multiclass task,
    which uses "the first label"): for ``scheme="ranked"``, by how many runs ranked the label
    first, then by how many runs had it, then label-set order; for "multi", by runs, then
    label-set order. With k > 2n/3 at most two labels can pass for the RLP, and with k > n/2
    "No Distortion" (exclusive within a run) cannot pass together with a distortion.

    A failed run (None) is a run without labels: the threshold stays k out of n, so an item
    with failed runs needs the same absolute agreement. If every run failed, the result is
    ``rule="no valid runs"`` with no label — the fallbacks describe disagreement, not absence.

    Raises:
        ValueError: ``len(runs_for_item) != n``, k outside 1..n, an unknown label, or a ranked
            run with more than two labels.
    """
    if not 1 <= k <= n:
        raise ValueError(f"need 1 ≤ k ≤ n, got k={k}, n={n}")
    if len(runs_for_item) != n:
        raise ValueError(f"expected {n} runs, got {len(runs_for_item)}")
    names = label_names(labels)
    order = {name: j for j, name in enumerate(names)}
    order.setdefault(OTHERS, len(order))
    runs = _check_runs(runs_for_item, allowed=set(order), scheme=scheme, where="item")
    valid = [_apply_others_rule(run) for run in runs if run is not None]
    counts: Counter[str] = Counter(lab for run in valid for lab in run)
    first: Counter[str] = Counter(run[0] for run in valid if run)
    common: _ConsensusCounts = {
        "counts": dict(counts),
        "first": dict(first),
        "n_runs": n,
        "n_valid_runs": len(valid),
    }
    if not any(valid):
        return Consensus([], "no valid runs", **common)
    selected = [lab for lab, c in counts.items() if c >= k]
    if selected:
        if scheme == "ranked":
            selected.sort(key=lambda lab: (-first[lab], -counts[lab], order[lab]))
        else:
            selected.sort(key=lambda lab: (-counts[lab], order[lab]))
        return Consensus(selected, "threshold", **common)
    if counts[NO_DISTORTION] > 0:
        return Consensus([NOT_SURE_IF_DISTORTION], NOT_SURE_IF_DISTORTION, **common)
    return Consensus([NOT_SURE_WHICH_DISTORTION], NOT_SURE_WHICH_DISTORTION, **common)


def consensus_for_items(
    runs_by_item: Sequence[Sequence[Run]],
    *,
    k: int = DEFAULT_K,
    n: int = DEFAULT_N,
    labels: LabelSpec | None = None,
    scheme: Scheme = "multi",
) -> list[Consensus]:
    """:func:`consensus_labels` for every item (errors name the item)."""
    out = []
    for i, runs in enumerate(runs_by_item):
        try:
            out.append(consensus_labels(runs, k=k, n=n, labels=labels, scheme=scheme))
        except ValueError as exc:
            raise ValueError(f"item {i}: {exc}") from exc
    return out


def _final_sets(items: Sequence[Consensus | Sequence[str]]) -> list[list[str]]:
    return [list(c.labels) if isinstance(c, Consensus) else list(c) for c in items]


def unambiguous_mask(*final_labels: Sequence[Consensus | Sequence[str]]) -> NDArray[np.bool_]:
    """Items to keep for modelling: unambiguous under every label setting given [CD §4.2].

    §4.2: "if a given USER INPUT received a valid CD label from the RLP prompt but an ambiguous
    category label from the MLP prompt, that example was excluded from all the label settings".
    Ambiguous = a §4.1 special category (or no label at all).
    """
    if not final_labels:
        raise ValueError("give at least one list of final labels")
    sets = [_final_sets(f) for f in final_labels]
    if len({len(s) for s in sets}) != 1:
        raise ValueError("the lists of final labels have different lengths")
    keep = np.ones(len(sets[0]), dtype=bool)
    for s in sets:
        keep &= np.array([bool(x) and not set(x) & set(AMBIGUOUS_LABELS) for x in s], dtype=bool)
    return keep


# --------------------------------------------------------------------------------------------
# Table 8 — distribution of final labels per configuration
# --------------------------------------------------------------------------------------------


def label_distribution_table(
    final_labels_by_config: Mapping[str, Sequence[Consensus | Sequence[str]]],
    *,
    labels: LabelSpec | None = None,
) -> pd.DataFrame:
    """Items per final label and their percentage, one column pair per configuration (Table 8).

    Percentages are of all items of the configuration; an item with several labels counts for
    each, so a column can exceed 100% (Appendix G: "the total percentages across labels exceed
    100%"). Rows: the distortions in label-set order, then "not sure if distortion", "not sure
    which distortion", "Others", "No Distortion" (Table 8's order), then any other label seen.
    """
    names = [lab for lab in label_names(labels) if lab != NO_DISTORTION]
    rows = names + [NOT_SURE_IF_DISTORTION, NOT_SURE_WHICH_DISTORTION, OTHERS, NO_DISTORTION]
    columns: dict[tuple[str, str], pd.Series] = {}
    extra: set[str] = set()
    for config, items in final_labels_by_config.items():
        sets = _final_sets(items)
        tally = Counter(lab for s in sets for lab in dict.fromkeys(s))
        extra |= set(tally) - set(rows)
        total = len(sets)
        counts = pd.Series(tally, dtype="int64")
        columns[(config, "n")] = counts
        columns[(config, "%")] = 100.0 * counts / total if total else counts * math.nan
    index = rows + sorted(extra)
    table = pd.DataFrame(columns).reindex(index)
    for config in final_labels_by_config:
        table[(config, "n")] = table[(config, "n")].fillna(0).astype("int64")
        table[(config, "%")] = table[(config, "%")].fillna(0.0)
    table.columns = pd.MultiIndex.from_tuples(table.columns, names=["configuration", "value"])
    return table


# --------------------------------------------------------------------------------------------
# Agreement of final labels with clinicians
# --------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class ClinicianAgreement:
    """Final (LLM-consensus) labels against clinicians' labels, item by item.

    ``per_label``: Cohen's kappa and agreement (share of items where both say present or both
    say absent) per label. All agreements are proportions in [0, 1].
    Item-level joint probability of agreement (the statistic Shreevastava & Foltz report as
    33.7% for their two annotators, §3.1), in three readings because the paper does not say
    which one was used: ``exact`` (same label set), ``dominant`` (same first label) and
    ``overlap`` (at least one label in common).
    """

    per_label: pd.DataFrame
    mean_kappa: float
    exact: float
    dominant: float
    overlap: float
    n_items: int
    n_excluded: int


def clinician_agreement(
    final_labels: Sequence[Consensus | Sequence[str]],
    clinician_labels: Sequence[Sequence[str] | None],
    *,
    labels: LabelSpec | None = None,
    exclude_ambiguous: bool = True,
) -> ClinicianAgreement:
    """Agreement of final labels with one clinician's (or a clinician consensus's) labels.

    Items without clinician labels are excluded, and with ``exclude_ambiguous`` (default, as
    §4.2 does for modelling) so are items whose final label is a special category; both are
    counted in ``n_excluded``. Labels: the label set plus "Others" when either side uses it.
    """
    ours = _final_sets(final_labels)
    if len(ours) != len(clinician_labels):
        raise ValueError(f"{len(ours)} final label sets but {len(clinician_labels)} clinician sets")
    names = label_names(labels)
    pairs = []
    for mine, theirs in zip(ours, clinician_labels, strict=True):
        if not theirs:
            continue
        if exclude_ambiguous and (not mine or set(mine) & set(AMBIGUOUS_LABELS)):
            continue
        pairs.append((list(dict.fromkeys(mine)), list(dict.fromkeys(theirs))))
    seen = {lab for pair in pairs for side in pair for lab in side}
    columns = names + [lab for lab in (OTHERS, *AMBIGUOUS_LABELS) if lab in seen]
    unknown = seen - set(columns)
    if unknown:
        raise ValueError(f"labels outside the label set: {sorted(unknown)}")
    col = {lab: j for j, lab in enumerate(columns)}
    a = np.zeros((len(pairs), len(columns)), dtype=bool)
    b = np.zeros_like(a)
    for i, (mine, theirs) in enumerate(pairs):
        a[i, [col[lab] for lab in mine]] = True
        b[i, [col[lab] for lab in theirs]] = True
    kappa, agree, reasons = cohen_kappa_binary(a, b)
    per_label = pd.DataFrame(
        {
            "label": columns,
            "n": len(pairs),
            "kappa": kappa,
            "agreement": agree,
            "final_prevalence": a.mean(axis=0) if len(pairs) else np.nan,
            "clinician_prevalence": b.mean(axis=0) if len(pairs) else np.nan,
            "reason": reasons,
        }
    ).set_index("label")
    finite = kappa[np.isfinite(kappa)]
    n = len(pairs)

    def share(hit: Iterable[bool]) -> float:
        return float(np.mean(list(hit))) if n else math.nan

    return ClinicianAgreement(
        per_label=per_label,
        mean_kappa=float(finite.mean()) if finite.size else math.nan,
        exact=share(set(m) == set(t) for m, t in pairs),
        dominant=share(m[0] == t[0] for m, t in pairs),
        overlap=share(bool(set(m) & set(t)) for m, t in pairs),
        n_items=n,
        n_excluded=len(ours) - n,
    )


# --------------------------------------------------------------------------------------------
# κ_F1 — chance-corrected weighted F1  [CD §5.2–5.3, Appendix J]
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KappaF1Report:
    """Weighted F1, its random baseline (closed form and simulated) and κ_F1.

    ``proportions``: p_c (binary/multiclass: share of items in class c; multilabel: share of
    items carrying label c). ``sim_mean``/``sim_sd``: weighted F1 of ``n_sim`` random
    assignments drawn from those proportions (Appendix J.1); ``sim_se`` = sd/√n_sim.
    """

    kind: str
    labels: list[str]
    n_items: int
    proportions: dict[str, float]
    f1: float
    f1_random: float
    kappa_f1: float
    sim_mean: float
    sim_sd: float
    n_sim: int
    reason: str | None = None

    @property
    def sim_se(self) -> float:
        return self.sim_sd / math.sqrt(self.n_sim) if self.n_sim > 0 else math.nan

    @property
    def sim_z(self) -> float:
        """(simulated mean − closed form) in standard errors of the simulated mean."""
        se = self.sim_se
        return (self.sim_mean - self.f1_random) / se if se and se > 0 else math.nan


def _class_index(
    values: Sequence[object], classes: list[object], *, what: str
) -> NDArray[np.int64]:
    pos = {c: j for j, c in enumerate(classes)}
    try:
        return np.fromiter((pos[v] for v in values), dtype=np.int64, count=len(values))
    except KeyError as exc:
        raise ValueError(f"{what}: label {exc.args[0]!r} is not in labels {classes}") from None


def _weighted_f1_batch_classes(
    t_idx: NDArray[np.int64], preds: NDArray[np.int64], n_classes: int
) -> FloatArray:
    """Weighted F1 of each row of ``preds`` (B, N) against ``t_idx`` (N,) — vectorised."""
    b, n = preds.shape
    offsets = (np.arange(b) * n_classes)[:, None]
    match = preds == t_idx[None, :]
    tp = np.bincount((offsets + t_idx[None, :])[match], minlength=b * n_classes)
    pred_count = np.bincount((offsets + preds).ravel(), minlength=b * n_classes)
    tp = tp.reshape(b, n_classes).astype(float)
    pred_count = pred_count.reshape(b, n_classes)
    support = np.bincount(t_idx, minlength=n_classes).astype(float)
    den = pred_count + support[None, :]
    f1 = np.divide(2.0 * tp, den, out=np.zeros_like(tp), where=den > 0)
    weighted: FloatArray = (f1 * support).sum(axis=1) / n
    return weighted


def _weighted_f1_batch_multilabel(truth: NDArray[np.bool_], preds: NDArray[np.bool_]) -> FloatArray:
    """Weighted F1 of each (N, L) slice of ``preds`` (B, N, L) against ``truth`` (N, L)."""
    tp = (preds & truth[None]).sum(axis=1).astype(float)
    pred_count = preds.sum(axis=1)
    support = truth.sum(axis=0).astype(float)
    den = pred_count + support[None, :]
    f1 = np.divide(2.0 * tp, den, out=np.zeros_like(tp), where=den > 0)
    weighted: FloatArray = (f1 * support).sum(axis=1) / support.sum()
    return weighted


def _chunks(total: int, size: int) -> Iterable[int]:
    while total > 0:
        yield min(size, total)
        total -= size


def _indicator(
    y: Sequence[Iterable[str]], classes: Sequence[object], *, what: str
) -> NDArray[np.bool_]:
    """(items, labels) boolean matrix from label collections (columns in ``classes`` order)."""
    col = {c: j for j, c in enumerate(classes)}
    sets = list(y)
    m = np.zeros((len(sets), len(classes)), dtype=bool)
    for i, s in enumerate(sets):
        if isinstance(s, str):
            raise ValueError(f"{what}, item {i}: a multilabel item is a collection, got {s!r}")
        for lab in s:
            if lab not in col:
                raise ValueError(f"{what}, item {i}: label {lab!r} is not in labels {classes}")
            m[i, col[lab]] = True
    return m


def _is_matrix(y: object) -> bool:
    return isinstance(y, np.ndarray) and y.ndim == 2 and y.dtype != object


def kappa_f1_report(
    y_true: Sequence[object] | ArrayLike,
    y_pred: Sequence[object] | ArrayLike,
    *,
    kind: Kind,
    labels: Sequence[str] | None = None,
    n_sim: int = 1000,
    seed: int = 0,
) -> KappaF1Report:
    """Weighted F1, F1_random, κ_F1 and a simulated random baseline [CD §5.2–5.3, App. J].

    - F1: support-weighted F1 (sklearn ``average="weighted"``; binary tasks weight both
      classes, as the paper's binary F1_random ≈ p² + (1 − p)² in Table 10 implies).
    - F1_random, binary/multiclass: Σ_c p_c² (§5.2: random assignment with the true class
      distribution gives precision = recall = F1 = p_c per class; weighted, a² + b² + c²).
    - F1_random, multilabel: the paper applies "the proposed formula in section 5.2" (App. J)
      without saying what p_c is. We use the same derivation per label: label c is assigned
      at random with its prevalence q_c (share of items carrying it), so its precision = recall
      = F1 = q_c, and the support weights are q_c / Σ q: F1_random = Σ q_c² / Σ q_c. This
      equals Σ p_c² when every item has one label, and it is what the simulation (same F1 as
      the model's) converges to, so κ_F1 compares like with like.
    - κ_F1 = (F1 − F1_random) / (1 − F1_random) (§5.3).
    - Simulation (App. J.1: "random label assignment using np.random.choice ... repeated 1000
      times"): ``n_sim`` assignments, vectorised; multiclass draws each prediction from p,
      multilabel draws each label independently with probability q_c. The closed form is the
      large-N value: F1 is a ratio, so the simulated mean sits below it by O(1/N) (about
      0.1/N for a 65:35 binary task), well under one standard error of the mean for N ≥ 100
      and n_sim = 1000; ``sim_z`` reports the gap in standard errors.

    Args:
        y_true, y_pred: binary/multiclass: one label per item; multilabel: a label collection
            per item, or (items, labels) 0/1 matrices (then ``labels`` names the columns).
        labels: class order (and the allowed set); default: sorted union of both sides.
    """
    if kind not in ("binary", "multiclass", "multilabel"):
        raise ValueError(f"kind must be binary, multiclass or multilabel, got {kind!r}")
    rng = np.random.default_rng(seed)
    nan = math.nan
    classes: list[object]
    if kind == "multilabel":
        if _is_matrix(y_true) and _is_matrix(y_pred):
            truth = np.asarray(y_true).astype(bool)
            pred = np.asarray(y_pred).astype(bool)
            width = truth.shape[1]
            classes = list(labels) if labels is not None else [str(j) for j in range(width)]
            if len(classes) != width:
                raise ValueError(f"{len(classes)} labels for {width} indicator columns")
        else:
            # Not matrices: a label collection per item (_indicator checks each).
            true_sets = cast(Sequence[Iterable[str]], y_true)
            pred_sets = cast(Sequence[Iterable[str]], y_pred)
            if labels is not None:
                classes = list(labels)
            else:
                both = list(true_sets) + list(pred_sets)
                classes = sorted({lab for s in both for lab in s}, key=str)
            truth = _indicator(true_sets, classes, what="y_true")
            pred = _indicator(pred_sets, classes, what="y_pred")
        if truth.shape != pred.shape:
            raise ValueError(f"y_true and y_pred differ in shape: {truth.shape} vs {pred.shape}")
        n_items = truth.shape[0]
        names = [str(c) for c in classes]
        q = truth.mean(axis=0) if n_items else np.zeros(truth.shape[1])
        f1 = stats.weighted_f1(truth, pred)
        f1_random = float((q**2).sum() / q.sum()) if q.sum() > 0 else nan
        proportions = dict(zip(names, map(float, q), strict=True))
        sims: list[FloatArray] = []
        # Chunks keep the (B, N, L) draw (uniform float64s, 8 bytes each) under ~40 MB whatever
        # n_sim is, so memory grows with the file, not with n_sim.
        step = max(1, int(5e6 // max(1, truth.size)))
        for b in _chunks(n_sim if n_items else 0, step):
            draws = rng.random((b, *truth.shape)) < q[None, None, :]
            sims.append(_weighted_f1_batch_multilabel(truth, draws))
    else:
        t_list, p_list = list(y_true), list(y_pred)  # type: ignore[arg-type]
        if len(t_list) != len(p_list):
            raise ValueError(f"y_true has {len(t_list)} items, y_pred {len(p_list)}")
        classes = list(labels) if labels is not None else sorted(set(t_list) | set(p_list), key=str)
        if kind == "binary" and len(classes) > 2:
            raise ValueError(f"binary task with {len(classes)} classes: {classes}")
        t_idx = _class_index(t_list, classes, what="y_true")
        p_idx = _class_index(p_list, classes, what="y_pred")
        n_items = t_idx.size
        names = [str(c) for c in classes]
        p = np.bincount(t_idx, minlength=len(classes)) / max(n_items, 1)
        f1 = stats.weighted_f1(t_idx, p_idx, labels=np.arange(len(classes)))
        baseline = stats.f1_random_baseline(t_idx)
        f1_random = baseline.value
        proportions = dict(zip(names, map(float, p), strict=True))
        sims = []
        step = max(1, int(5e6 // max(1, n_items)))
        for b in _chunks(n_sim if n_items else 0, step):
            drawn = rng.choice(len(classes), size=(b, n_items), p=p)
            sims.append(_weighted_f1_batch_classes(t_idx, drawn, len(classes)))
    simulated = np.concatenate(sims) if sims else np.array([])
    kappa = stats.kappa_f1(f1.value, f1_random)
    return KappaF1Report(
        kind=kind,
        labels=names,
        n_items=int(n_items),
        proportions=proportions,
        f1=f1.value,
        f1_random=float(f1_random),
        kappa_f1=kappa.value,
        sim_mean=float(simulated.mean()) if simulated.size else nan,
        sim_sd=float(simulated.std(ddof=1)) if simulated.size > 1 else nan,
        n_sim=int(simulated.size),
        reason=f1.reason or kappa.reason,
    )


# --------------------------------------------------------------------------------------------
# Predictions CSV
# --------------------------------------------------------------------------------------------


class PredictionsCsvError(ValueError):
    """A predictions CSV that cannot be read; the message names file, line and column."""


_SEPARATORS = (";", "|")


def read_predictions_csv(
    file: str | os.PathLike[str] | IO[str],
    *,
    kind: Kind | None = None,
    labels: Sequence[str] | None = None,
    max_rows: int | None = None,
    max_labels: int | None = None,
    name: str | None = None,
) -> tuple[list[str] | list[list[str]], list[str] | list[list[str]], Kind, list[str]]:
    """(y_true, y_pred, kind, labels) from a CSV with columns ``true`` and ``predicted``.

    Multi-label cells separate labels with ";" or "|". ``kind`` defaults to multilabel if any
    cell has a separator, else binary for ≤ 2 distinct labels, else multiclass. With ``labels``
    every cell must use them (case-insensitively; returned in the given spelling). Errors are
    one line naming the file, the line (header = line 1) and the column.

    ``max_rows`` and ``max_labels`` are checked while reading, before any array exists: the
    statistics hold items × labels indicators, so a file of a few kilobytes with a new label on
    every line would otherwise ask for memory quadratic in its size. ``name`` is the file's name
    in messages (an upload's stream has none of its own).
    """
    if name is None:
        name = str(file) if isinstance(file, str | os.PathLike) else getattr(file, "name", "<csv>")
    if isinstance(file, str | os.PathLike):
        try:
            text = Path(file).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise PredictionsCsvError(f"{name}: cannot read: {exc}") from None
        handle: IO[str] = io.StringIO(text)
    else:
        handle = file
    reader = csv.reader(handle)
    try:
        header = next(reader)
    except StopIteration:
        raise PredictionsCsvError(
            f"{name}: empty file, expected a header with true,predicted"
        ) from None
    except csv.Error as exc:
        raise PredictionsCsvError(f"{name}: line 1: {exc}") from None
    header_keys = [h.strip().lstrip("\ufeff").casefold() for h in header]
    index = {}
    for column in ("true", "predicted"):
        if column not in header_keys:
            found = ", ".join(h.strip() for h in header) or "nothing"
            raise PredictionsCsvError(f"{name}: missing column {column!r} (header: {found})")
        index[column] = header_keys.index(column)
    known = {lab.casefold(): lab for lab in labels} if labels is not None else None
    cells: dict[str, list[list[str]]] = {"true": [], "predicted": []}
    distinct: set[str] = set()
    multi_seen = False
    try:
        for row in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue  # blank line
            if max_rows is not None and len(cells["true"]) >= max_rows:
                raise PredictionsCsvError(
                    f"{name}: line {line}: more than {max_rows:,} data rows, the most one file "
                    "may have"
                )
            for column, j in index.items():
                raw = row[j].strip() if j < len(row) else ""
                if not raw:
                    raise PredictionsCsvError(f"{name}: line {line}, column {column!r}: empty cell")
                parts = [raw]
                for sep in _SEPARATORS:
                    parts = [piece for part in parts for piece in part.split(sep)]
                parts = [part.strip() for part in parts]
                if len(parts) > 1:
                    multi_seen = True
                    if kind in ("binary", "multiclass"):
                        raise PredictionsCsvError(
                            f"{name}: line {line}, column {column!r}: several labels in a "
                            f"{kind} file: {raw!r}"
                        )
                if not all(parts):
                    raise PredictionsCsvError(
                        f"{name}: line {line}, column {column!r}: empty label in {raw!r}"
                    )
                if known is not None:
                    missing = [part for part in parts if part.casefold() not in known]
                    if missing:
                        raise PredictionsCsvError(
                            f"{name}: line {line}, column {column!r}: unknown label "
                            f"{missing[0]!r} (known: {', '.join(labels or [])})"
                        )
                    parts = [known[part.casefold()] for part in parts]
                distinct.update(parts)
                if max_labels is not None and len(distinct) > max_labels:
                    raise PredictionsCsvError(
                        f"{name}: line {line}, column {column!r}: more than {max_labels} "
                        "distinct labels, the most one file may have"
                    )
                cells[column].append(list(dict.fromkeys(parts)))
    except csv.Error as exc:
        raise PredictionsCsvError(f"{name}: line {reader.line_num}: {exc}") from None
    if not cells["true"]:
        raise PredictionsCsvError(f"{name}: no data rows")
    seen = sorted({lab for col in cells.values() for s in col for lab in s})
    resolved: Kind
    if kind is not None:
        resolved = kind
    elif multi_seen:
        resolved = "multilabel"
    else:
        resolved = "binary" if len(seen) <= 2 else "multiclass"
    classes = list(labels) if labels is not None else seen
    if resolved == "binary" and len(classes) > 2:
        raise PredictionsCsvError(f"{name}: binary task but {len(classes)} labels: {classes}")
    if resolved == "multilabel":
        return cells["true"], cells["predicted"], resolved, classes
    return (
        [s[0] for s in cells["true"]],
        [s[0] for s in cells["predicted"]],
        resolved,
        classes,
    )


# --------------------------------------------------------------------------------------------
# Stratified 70:15:15 split  [CD §4.2]
# --------------------------------------------------------------------------------------------


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
