"""The label set and the runs of the distortion workflow: names, checks, shared constants.

Conventions: a *run* is the list of canonical labels one LLM call produced (what
scoring.label_parsing.parse_label_output returns in ``labels``: Table 1 names, "No Distortion",
or "Others"), ranked for the RLP; ``None`` stands for a failed run (unparseable output). Runs of
an item are a list of runs; ``runs_by_item`` is a list of those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from scoring.distortions import DEFAULT_DISTORTIONS

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


def check_runs(
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


def runs_matrix(
    runs_by_item: Sequence[Sequence[Run]], *, allowed: set[str], scheme: Scheme | None = None
) -> tuple[list[list[list[str] | None]], int]:
    """(checked runs per item, N): :func:`check_runs` for every item, which must all have the
    same number N of runs (Fleiss' kappa and the indicators need N raters per item)."""
    if len(runs_by_item) == 0:
        raise ValueError("no items")
    checked = [
        check_runs(runs, allowed=allowed, scheme=scheme, where=f"item {i}")
        for i, runs in enumerate(runs_by_item)
    ]
    lengths = {len(runs) for runs in checked}
    if len(lengths) != 1:
        raise ValueError(f"items have different numbers of runs: {sorted(lengths)}")
    return checked, lengths.pop()
