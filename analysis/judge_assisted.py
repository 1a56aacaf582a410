"""Judge-assisted clinician means per responder × attribute, from the long scores frame.

Pure pandas/numpy (no Django), like analysis.reports: a selector hands in the frame, the
statistics come from :mod:`analysis.ppi`. See docs/judge-assisted.md.

For a responder × attribute cell and conversation i:

- Y_i is the mean of the clinicians' scores of the response (missing if no clinician scored it);
- f_i is the mean of the chosen judges' scores. A judge that must not score this responder
  (self-preference exclusion, as in the reliability report) does not count; every other chosen
  judge must have a valid score, or the conversation is left out of the cell (never guessed).

Labelled conversations are those whose clinician ratings are used: every conversation with Y_i
and f_i, or — with an explicit ``labelled`` set of conversation ids — the listed ones that have
both (a listed one missing either is left out of the cell entirely). Every other conversation
with f_i is unlabelled, even where clinicians rated it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import ppi

CLINICIAN = "clinician"
JUDGE = "judge"

#: The columns the management command promises first, in this order.
CONTRACT_COLUMNS: tuple[str, ...] = (
    "responder",
    "attribute",
    "n_labelled",
    "n_unlabelled",
    "estimate",
    "ci_low",
    "ci_high",
    "lambda",
    "clinician_only_estimate",
    "clinician_only_ci_low",
    "clinician_only_ci_high",
    "judge_only_mean",
    "width_ratio",
)
EXTRA_COLUMNS: tuple[str, ...] = ("se", "clinician_only_se", "ratings_saved", "judges")


@dataclass(frozen=True)
class CellArrays:
    """Y and f per (conversation, responder, attribute), wide: rows are (conversation,
    attribute), columns responders. NaN where missing; ``labelled`` marks the conversations
    whose clinician ratings may be used."""

    y: pd.DataFrame
    f: pd.DataFrame
    labelled: np.ndarray  # bool per row of y / f


@dataclass(frozen=True)
class ScoreCodes:
    """The long scores frame as integer codes, factorised once (:func:`score_codes`).

    Factorising the frame's string columns is most of the cost of a table; a caller that
    builds several tables from one frame (judge choices, labelled shares) builds this once
    and hands it to :func:`cell_arrays`. Conversations and responders are coded in sorted
    label order; ``rater_is_clinician`` and the label arrays are indexed by code.
    """

    conversation: np.ndarray
    conversations: np.ndarray
    responder: np.ndarray
    responders: np.ndarray
    rater: np.ndarray
    raters: np.ndarray
    rater_is_clinician: np.ndarray
    attribute: np.ndarray
    attributes: np.ndarray
    score: np.ndarray


def score_codes(df: pd.DataFrame) -> ScoreCodes:
    """Integer codes of a long scores frame (columns conversation, responder, rater,
    rater_kind, attribute, score); a score that is not a number becomes NaN."""
    # Factorising the Series (not its values) uses a categorical's integer codes (the
    # selector's frame is categorical, its categories sorted as sort=True sorts strings).
    conv_code, conv_uni = pd.factorize(df["conversation"], sort=True)
    resp_code, resp_uni = pd.factorize(df["responder"], sort=True)
    rater_code, rater_uni = pd.factorize(df["rater"])
    attr_code, attr_uni = pd.factorize(df["attribute"])
    is_clinician = np.zeros(len(rater_uni), dtype=bool)  # one kind per rater: any row tells it
    is_clinician[rater_code[(df["rater_kind"] == CLINICIAN).to_numpy()]] = True
    return ScoreCodes(
        conversation=conv_code.astype(np.int64),
        conversations=np.asarray(conv_uni, dtype=object),
        responder=resp_code.astype(np.int64),
        responders=np.asarray(resp_uni, dtype=object),
        rater=rater_code.astype(np.int64),
        raters=np.asarray(rater_uni, dtype=object),
        rater_is_clinician=is_clinician,
        attribute=attr_code.astype(np.int64),
        attributes=np.asarray(attr_uni, dtype=object),
        score=pd.to_numeric(df["score"], errors="coerce").to_numpy(dtype=np.float64),
    )


def _compact(codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Renumber the codes in use as 0..k-1 keeping their order (O(n), no sort)."""
    used = np.zeros(n, dtype=bool)
    used[codes] = True
    remap = np.cumsum(used) - 1
    return remap[codes], np.flatnonzero(used)


def cell_arrays(
    source: pd.DataFrame | ScoreCodes,
    *,
    judges: Sequence[str],
    attributes: Sequence[str],
    exclusions: Mapping[str, Set[str]] | None = None,
    labelled: Collection[str] | None = None,
) -> CellArrays:
    """Y (clinician mean) and f (chosen judges' mean) for every response, see the module doc.

    ``source`` is the long scores frame or, cheaper when reused, its :func:`score_codes`.
    """
    if not judges:
        raise ValueError("choose at least one judge")
    codes = source if isinstance(source, ScoreCodes) else score_codes(source)
    # Integer codes and bincount throughout (as reports.paired_cells): a groupby/unstack per
    # judge took ~0.8 s on MentalAlign-70k, string comparisons over 200k rows most of the rest.
    attrs = list(attributes)
    attr_code = pd.Index(attrs).get_indexer(codes.attributes).astype(np.int64)[codes.attribute]
    judge_code = {name: i for i, name in enumerate(codes.raters)}
    chosen_mask = np.zeros(len(codes.raters), dtype=bool)
    for judge in judges:
        if judge in judge_code:
            chosen_mask[judge_code[judge]] = True
    chosen_mask &= ~codes.rater_is_clinician
    is_clin_all = codes.rater_is_clinician[codes.rater]
    keep = (attr_code >= 0) & np.isfinite(codes.score) & (is_clin_all | chosen_mask[codes.rater])
    conv_code, conv_used = _compact(codes.conversation[keep], len(codes.conversations))
    resp_code, resp_used = _compact(codes.responder[keep], len(codes.responders))
    conv_uni, resp_uni = codes.conversations[conv_used], codes.responders[resp_used]
    attr_code, score = attr_code[keep], codes.score[keep]
    is_clin, rater_code = is_clin_all[keep], codes.rater[keep]
    n_a, n_r = len(attrs), len(resp_uni)
    n_rows = len(conv_uni) * n_a
    key = (conv_code * n_a + attr_code) * n_r + resp_code
    size = n_rows * n_r

    def cell_mean(mask: np.ndarray) -> np.ndarray:
        counts = np.bincount(key[mask], minlength=size)
        sums = np.bincount(key[mask], weights=score[mask], minlength=size)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (sums / counts).reshape(n_rows, n_r)

    y_arr = cell_mean(is_clin)
    total = np.zeros((n_rows, n_r))
    counted = np.zeros(n_r)
    complete = np.ones((n_rows, n_r), dtype=bool)
    for judge in judges:
        scores = cell_mean(~is_clin & (rater_code == judge_code.get(judge, -1)))
        counts = ~np.isin(resp_uni, list((exclusions or {}).get(judge, ())))
        present = np.isfinite(scores)
        total += np.where(present, scores, 0.0) * counts
        counted += counts
        complete &= present | ~counts[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        f_arr = np.where(complete & (counted > 0)[None, :], total / counted[None, :], np.nan)
    index = pd.MultiIndex.from_product(
        [pd.Index(conv_uni, name="conversation"), pd.Index(attrs, name="attribute")]
    )
    columns = pd.Index(resp_uni, name="responder")
    y = pd.DataFrame(y_arr, index=index, columns=columns)
    f = pd.DataFrame(f_arr, index=index, columns=columns)
    if labelled is None:
        mask = np.ones(n_rows, dtype=bool)
    else:
        listed = np.isin(np.asarray(conv_uni, dtype=str), np.array(list(labelled), dtype=str))
        mask = np.repeat(listed, n_a)
    return CellArrays(y=y, f=f, labelled=mask)


def _estimate(
    y: np.ndarray, f: np.ndarray, listed: np.ndarray, explicit: bool, cell: np.ndarray, n: int,
    alpha: float,
) -> ppi.CellEstimates:  # fmt: skip
    """Split (y, f) observations into labelled/unlabelled per the module rules and estimate."""
    has_y, has_f = np.isfinite(y), np.isfinite(f)
    if explicit:
        lab = listed & has_y & has_f
        unl = ~listed & has_f
    else:
        lab = has_y & has_f
        unl = ~has_y & has_f
    return ppi.ppi_mean_cells(
        y=y[lab], f=f[lab], cell=cell[lab], f_unlabelled=f[unl], cell_unlabelled=cell[unl],
        n_cells=n, alpha=alpha,
    )  # fmt: skip


def _frame(
    keys: dict[str, list[Any]], est: ppi.CellEstimates, judges: Sequence[str]
) -> pd.DataFrame:
    out = pd.DataFrame(
        {
            **keys,
            "n_labelled": est.n_labelled,
            "n_unlabelled": est.n_unlabelled,
            "estimate": est.estimate,
            "ci_low": est.ci_low,
            "ci_high": est.ci_high,
            "lambda": est.lam,
            "clinician_only_estimate": est.clinician_only_estimate,
            "clinician_only_ci_low": est.clinician_only_ci_low,
            "clinician_only_ci_high": est.clinician_only_ci_high,
            "judge_only_mean": est.judge_only_mean,
            "width_ratio": est.width_ratio,
            "se": est.se,
            "clinician_only_se": est.clinician_only_se,
            "ratings_saved": est.ratings_saved,
            "judges": "+".join(judges),
        }
    )
    return out[(out["n_labelled"] > 0) | (out["n_unlabelled"] > 0)].reset_index(drop=True)


def means_table(
    arrays: CellArrays,
    *,
    judges: Sequence[str],
    attributes: Sequence[str],
    alpha: float = 0.05,
    explicit_labelled: bool = False,
) -> pd.DataFrame:
    """One row per responder × attribute (rubric order), contract columns first."""
    attrs = list(attributes)
    responders = list(arrays.y.columns)
    y, f = arrays.y.to_numpy(dtype=float), arrays.f.to_numpy(dtype=float)
    attr_idx = pd.Index(attrs).get_indexer(arrays.y.index.get_level_values("attribute"))
    n_r = len(responders)
    # cell code = attribute * n_r + responder, one observation per (row, responder)
    cell = (attr_idx[:, None] * n_r + np.arange(n_r)[None, :]).ravel()
    listed = np.repeat(arrays.labelled, n_r)
    est = _estimate(y.ravel(), f.ravel(), listed, explicit_labelled, cell, len(attrs) * n_r, alpha)
    keys = {
        "responder": [r for _ in attrs for r in responders],
        "attribute": [a for a in attrs for _ in responders],
    }
    return _frame(keys, est, judges)


def differences_table(
    arrays: CellArrays,
    *,
    judges: Sequence[str],
    attributes: Sequence[str],
    alpha: float = 0.05,
    explicit_labelled: bool = False,
) -> pd.DataFrame:
    """The same estimator on paired differences Y_A − Y_B with f_A − f_B, one row per
    responder pair × attribute (columns ``responder_a``, ``responder_b``, then as
    :func:`means_table`): "A beats B on Safety according to clinicians" when ci_low > 0."""
    attrs = list(attributes)
    responders = list(arrays.y.columns)
    y, f = arrays.y.to_numpy(dtype=float), arrays.f.to_numpy(dtype=float)
    a_idx, b_idx = np.triu_indices(len(responders), k=1)
    n_p = a_idx.size
    attr_idx = pd.Index(attrs).get_indexer(arrays.y.index.get_level_values("attribute"))
    dy = y[:, a_idx] - y[:, b_idx]  # NaN wherever either side is missing
    dfj = f[:, a_idx] - f[:, b_idx]
    cell = (attr_idx[:, None] * n_p + np.arange(n_p)[None, :]).ravel()
    listed = np.repeat(arrays.labelled, n_p)
    est = _estimate(
        dy.ravel(), dfj.ravel(), listed, explicit_labelled, cell, len(attrs) * n_p, alpha
    )
    keys = {
        "responder_a": [responders[a] for _ in attrs for a in a_idx],
        "responder_b": [responders[b] for _ in attrs for b in b_idx],
        "attribute": [a for a in attrs for _ in range(n_p)],
    }
    return _frame(keys, est, judges)


def ranking_table(means: pd.DataFrame, differences: pd.DataFrame) -> pd.DataFrame:
    """Responders ranked per attribute by the judge-assisted estimate; ``separated_from_next``
    says whether the paired-difference CI of this place and the next one excludes 0."""
    diff = {
        (row.attribute, row.responder_a, row.responder_b): (row.ci_low, row.ci_high)
        for row in differences.itertuples(index=False)
    }
    rows = []
    for attribute, group in means.groupby("attribute", sort=False):
        ranked = group.sort_values("estimate", ascending=False).reset_index(drop=True)
        for place, row in ranked.iterrows():
            separated: bool | None = None
            if place + 1 < len(ranked):
                nxt = ranked.loc[place + 1, "responder"]
                low, high = diff.get((attribute, row.responder, nxt), (np.nan, np.nan))
                if np.isnan(low):
                    low, high = (
                        -v for v in diff.get((attribute, nxt, row.responder), (np.nan,) * 2)
                    )
                    low, high = min(low, high), max(low, high)
                separated = None if np.isnan(low) else bool(low > 0 or high < 0)
            rows.append(
                {
                    "attribute": attribute,
                    "place": place + 1,
                    "responder": row.responder,
                    "estimate": row.estimate,
                    "ci_low": row.ci_low,
                    "ci_high": row.ci_high,
                    "separated_from_next": separated,
                }
            )
    return pd.DataFrame(rows)


def adjacent_separations(
    ranking: pd.DataFrame, differences: pd.DataFrame, separations: pd.DataFrame
) -> pd.DataFrame:
    """For each place of :func:`ranking_table` and the next one: their difference (upper minus
    lower place) with its interval, whether it is separated, and the clinician-rated
    conversations needed to separate them. ``separations`` is
    analysis.planner.separation_table(differences), row for row; a pair is looked up in either
    orientation (B − A is minus A − B: the interval flips, the plan is the same)."""
    plan = {
        (d.attribute, d.responder_a, d.responder_b): (d, p)
        for d, p in zip(
            differences.itertuples(index=False), separations.itertuples(index=False), strict=True
        )
    }
    rows = []
    for attribute, group in ranking.groupby("attribute", sort=False):
        ranked = group.sort_values("place").reset_index(drop=True)
        for place in range(len(ranked) - 1):
            upper, lower = ranked.loc[place, "responder"], ranked.loc[place + 1, "responder"]
            found = plan.get((attribute, upper, lower))
            flip = found is None
            if flip:
                found = plan.get((attribute, lower, upper))
            if found is None:
                continue
            d, p = found
            low, high = (-d.ci_high, -d.ci_low) if flip else (d.ci_low, d.ci_high)
            rows.append(
                {
                    "attribute": attribute,
                    "place": int(ranked.loc[place, "place"]),
                    "responder": upper,
                    "next_responder": lower,
                    "difference": -d.estimate if flip else d.estimate,
                    "ci_low": low,
                    "ci_high": high,
                    "separated": ranked.loc[place, "separated_from_next"],
                    "n_labelled": d.n_labelled,
                    "more_clinician_only": p.more_clinician_only,
                    "more_judge_assisted": p.more_judge_assisted,
                }
            )
    return pd.DataFrame(rows, columns=list(ADJACENT_COLUMNS))


ADJACENT_COLUMNS: tuple[str, ...] = (
    "attribute",
    "place",
    "responder",
    "next_responder",
    "difference",
    "ci_low",
    "ci_high",
    "separated",
    "n_labelled",
    "more_clinician_only",
    "more_judge_assisted",
)
