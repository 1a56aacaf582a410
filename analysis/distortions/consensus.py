"""Final labels of an item from its runs (Appendix G) and their distribution (Table 8)
[CD §4.1, §4.2]."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from analysis.distortions.labels import (
    AMBIGUOUS_LABELS,
    DEFAULT_K,
    DEFAULT_N,
    NOT_SURE_IF_DISTORTION,
    NOT_SURE_WHICH_DISTORTION,
    LabelSpec,
    Run,
    Scheme,
    check_runs,
    label_names,
)
from scoring.distortions import NO_DISTORTION, OTHERS

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
    runs = check_runs(runs_for_item, allowed=set(order), scheme=scheme, where="item")
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


def final_sets(items: Sequence[Consensus | Sequence[str]]) -> list[list[str]]:
    """The final label lists of ``items``, whether given as Consensus results or as lists."""
    return [list(c.labels) if isinstance(c, Consensus) else list(c) for c in items]


def unambiguous_mask(*final_labels: Sequence[Consensus | Sequence[str]]) -> NDArray[np.bool_]:
    """Items to keep for modelling: unambiguous under every label setting given [CD §4.2].

    §4.2: "if a given USER INPUT received a valid CD label from the RLP prompt but an ambiguous
    category label from the MLP prompt, that example was excluded from all the label settings".
    Ambiguous = a §4.1 special category (or no label at all).
    """
    if not final_labels:
        raise ValueError("give at least one list of final labels")
    sets = [final_sets(f) for f in final_labels]
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
        sets = final_sets(items)
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
