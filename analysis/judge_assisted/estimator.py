"""Judge-assisted clinician means per responder × attribute, from the long scores frame.

Pure pandas/numpy (no Django), like analysis.reports: a selector hands in the frame, the
statistics come from :mod:`analysis.ppi`. See docs/judge-assisted.md.

For a responder × attribute cell and conversation i:

- Y_i is the mean of the clinicians' scores of the response (missing if no clinician scored it);
- f_i is the mean of the chosen judges' scores. A judge that must not score this responder
  (self-preference exclusion, as in the reliability report) does not count; every other chosen
  judge must have a valid score, or f_i is missing (never guessed).

The *labelled* conversations are the clinicians' sample (the study's **design**): by default
every conversation with at least one clinician score, or an explicit ``labelled`` set of
conversation ids (a stored clinician sample or ``--labelled FILE``). **The estimand** is the
clinicians' mean score over the responses of the study that clinicians rate. Per cell, a
response of a labelled conversation is

- *rated* when it has Y_i: it counts in the clinician mean, whether or not the judges scored it
  (``n_judge_missing`` counts those they did not; such a response is in the clinician mean
  only, never given a guessed judge score);
- *non-response* when the judges scored it but no clinician did (``n_nonresponse``). Clinicians
  skip some responses on purpose (an empty or broken one), and the same kind of response sits
  unseen among the unlabelled ones. The judges' correction therefore compares their mean over
  every unlabelled response with their mean over every labelled one, rated or not, scaled by the
  share rated (analysis.ppi.ppi_mean_cells): whatever makes clinicians skip a response cancels
  out by the design, with no test to pass.

Every response of a conversation outside the sample with f_i is *unlabelled*, even where
clinicians rated it (so that a study can be re-analysed as if only its sample had been rated).
A cell whose responder every chosen judge excludes keeps its row, clinician-only, with a note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis import ppi
from analysis.reports import WORTH_IT_SAVING

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
EXTRA_COLUMNS: tuple[str, ...] = (
    "se",
    "clinician_only_se",
    "ratings_saved",
    "judges",
    "n_nonresponse",
    "nonresponse_judge_gap",
    "n_judge_missing",
    "interval",
    "design",
    "warning",
    "note",
)
#: The product's interval: Student's t corrected near the ends of the scale (analysis.ppi).
INTERVAL = "bounded"
#: Labelled responses per cell below which the interval's coverage was not checked by
#: simulation (docs/judge-assisted.md: 5 % of MentalAlign-70k's conversations, 50, is the
#: smallest sample the validation draws); such cells say so in ``warning``.
MIN_VALIDATED_N = 50


@dataclass(frozen=True)
class CellArrays:
    """Y and f per (conversation, responder, attribute), wide: rows are (conversation,
    attribute), columns responders. NaN where missing; ``labelled`` marks the conversations
    whose clinician ratings may be used."""

    y: pd.DataFrame
    f: pd.DataFrame
    #: bool per row of y / f (the conversation is in the clinicians' sample), or per row and
    #: responder (a sample of responses rather than conversations).
    labelled: np.ndarray
    #: bool per responder (column): every chosen judge's self-preference exclusion covers it.
    excluded: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=bool))


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
    if labelled is None:  # the sample is every conversation with a clinician score
        listed = np.zeros(len(conv_uni), dtype=bool)
        listed[conv_code[is_clin]] = True
    else:
        listed = np.isin(np.asarray(conv_uni, dtype=str), np.array(list(labelled), dtype=str))
    return CellArrays(y=y, f=f, labelled=np.repeat(listed, n_a), excluded=counted == 0)


@dataclass(frozen=True)
class Estimated:
    est: ppi.CellEstimates
    #: Per cell: the judges' mean over non-responded responses minus that over rated ones.
    judge_gap: np.ndarray
    #: Per cell: the chosen judges' self-preference exclusion covers it (clinician-only).
    excluded: np.ndarray


def _estimate(
    y: np.ndarray, f: np.ndarray, listed: np.ndarray, cell: np.ndarray, n: int, alpha: float,
    interval: str, bounds: tuple[float, float], excluded: np.ndarray,
    correction: tuple[np.ndarray, np.ndarray] | None = None,
) -> Estimated:  # fmt: skip
    """Split (y, f) observations by the module's rules and estimate (analysis.ppi).

    Labelled responses with a clinician score count in the clinician mean whether or not the
    judges scored them; the judges' correction compares their mean over every unlabelled
    response with their mean over every labelled one, non-responded included, so that the
    responses clinicians skip cancel out by design instead of by a test (analysis.ppi's
    ``ppi_mean_cells``, docs/judge-assisted.md).
    """
    has_y, has_f = np.isfinite(y), np.isfinite(f)
    both = listed & has_y & has_f
    y_only = listed & has_y & ~has_f
    nonresp = listed & ~has_y & has_f
    unl = ~listed & has_f
    est = ppi.ppi_mean_cells(
        y=y[both], f=f[both], cell=cell[both], f_unlabelled=f[unl], cell_unlabelled=cell[unl],
        n_cells=n, alpha=alpha, interval=interval, y_only=y[y_only], cell_y_only=cell[y_only],
        f_nonresponse=f[nonresp], cell_nonresponse=cell[nonresp], bounds=bounds,
        correction=correction,
    )  # fmt: skip
    with np.errstate(invalid="ignore", divide="ignore"):
        count_r = np.bincount(cell[both], minlength=n)
        count_n = np.bincount(cell[nonresp], minlength=n)
        gap = ppi.cell_sums(cell[nonresp], f[nonresp], n) / count_n - (
            ppi.cell_sums(cell[both], f[both], n) / count_r
        )
    return Estimated(est=est, judge_gap=np.where(count_n > 0, gap, np.nan), excluded=excluded)


def _note(est: ppi.CellEstimates, i: int, gap: float, excluded: bool) -> str:
    """What a reader must know about one cell, in words ("" when nothing)."""
    notes = []
    if excluded:
        notes.append(
            "the chosen judges do not score this responder (self-preference exclusion): "
            "clinician-only"
        )
    missing = int(est.n_judge_missing[i]) if est.n_judge_missing is not None else 0
    if missing and not excluded:
        notes.append(
            f"{missing} clinician-rated response{'s' if missing != 1 else ''} the judges did not "
            "score count in the clinician mean, not in the judges' correction"
        )
    skipped = int(est.n_nonresponse[i]) if est.n_nonresponse is not None else 0
    if skipped and np.isfinite(gap):
        way = "lower" if gap < 0 else "higher"
        notes.append(
            f"clinicians left {skipped} response{'s' if skipped != 1 else ''} unrated that the "
            f"judges score {abs(gap):.2f} points {way} than the rated ones: the estimate is the "
            "mean over the responses clinicians rate, and the judges' correction compares "
            "like with like (rated and unrated in both pools)"
        )
    return "; ".join(notes)


def _warning(est: ppi.CellEstimates, i: int) -> str:
    """What limits the cell's interval, in words ("" when nothing)."""
    n = int(est.n_labelled[i])
    if n < 2:
        return (
            f"not estimable: {n} clinician-rated response{'s' if n != 1 else ''}; an estimate "
            "and its interval need at least 2"
        )
    if n < MIN_VALIDATED_N:
        return (
            f"only {n} clinician-rated responses: the interval's coverage was checked by "
            f"simulation from {MIN_VALIDATED_N} up"
        )
    return ""


def _frame(
    keys: dict[str, list[Any]], estimated: Estimated, judges: Sequence[str], design: str
) -> pd.DataFrame:
    est = estimated.est
    n_cells = est.n_labelled.size
    none = np.zeros(n_cells, dtype=np.int64)
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
            "n_nonresponse": est.n_nonresponse if est.n_nonresponse is not None else none,
            "nonresponse_judge_gap": estimated.judge_gap,
            "n_judge_missing": est.n_judge_missing if est.n_judge_missing is not None else none,
            "interval": est.interval,
            "design": design,
            "warning": [_warning(est, i) for i in range(n_cells)],
            "note": [
                _note(est, i, float(estimated.judge_gap[i]), bool(estimated.excluded[i]))
                for i in range(n_cells)
            ],
        }
    )
    seen = (out["n_labelled"] > 0) | (out["n_unlabelled"] > 0) | (out["n_nonresponse"] > 0)
    return out[seen].reset_index(drop=True)


def savings_summary(means: pd.DataFrame) -> str:
    """One sentence on whether the judges are worth it on this study: the median over estimable
    cells of ``ratings_saved`` (1 − width ratio²), against WORTH_IT_SAVING."""
    saved = means["ratings_saved"].to_numpy(dtype=float)
    saved = saved[np.isfinite(saved)]
    if not saved.size:
        return (
            "No cell has an estimate yet: there is nothing to say about what the judges would save."
        )
    median = float(np.median(saved))
    share = f"{max(median, 0.0) * 100:.0f} %"
    if median < WORTH_IT_SAVING:
        return (
            f"On this study the judges would save {share} of clinician ratings at equal "
            f"interval width (median over {saved.size} cells): rate with clinicians alone."
        )
    return (
        f"On this study the judges would save {share} of clinician ratings at equal interval "
        f"width (median over {saved.size} cells): judge-assisted estimates are worth using."
    )


def _cell_arrays(
    arrays: CellArrays, attributes: Sequence[str]
) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(attributes, responders, Y, f, each row's attribute index, the labelled mask per row and
    responder) of `arrays`: what both tables start from."""
    attrs = list(attributes)
    responders = list(arrays.y.columns)
    y, f = arrays.y.to_numpy(dtype=float), arrays.f.to_numpy(dtype=float)
    attr_idx = pd.Index(attrs).get_indexer(arrays.y.index.get_level_values("attribute"))
    labelled = arrays.labelled
    if labelled.ndim == 1:  # one flag per row: the same for every responder
        labelled = np.repeat(labelled[:, None], len(responders), axis=1)
    return attrs, responders, y, f, attr_idx, labelled


def _excluded(arrays: CellArrays, n_responders: int) -> np.ndarray:
    if arrays.excluded.size == n_responders:
        return arrays.excluded
    return np.zeros(n_responders, dtype=bool)


def means_table(
    arrays: CellArrays,
    *,
    judges: Sequence[str],
    attributes: Sequence[str],
    alpha: float = 0.05,
    interval: str = INTERVAL,
    bounds: tuple[float, float] = (1.0, 5.0),
    design: str = "",
) -> pd.DataFrame:
    """One row per responder × attribute (rubric order), contract columns first; ``bounds``
    are the rubric scale's ends, ``design`` names the clinicians' sample in every row."""
    attrs, responders, y, f, attr_idx, listed = _cell_arrays(arrays, attributes)
    n_r = len(responders)
    # cell code = attribute * n_r + responder, one observation per (row, responder)
    cell = (attr_idx[:, None] * n_r + np.arange(n_r)[None, :]).ravel()
    excluded = np.tile(_excluded(arrays, n_r), len(attrs))
    estimated = _estimate(
        y.ravel(), f.ravel(), listed.ravel(), cell, len(attrs) * n_r, alpha, interval, bounds,
        excluded,
    )  # fmt: skip
    keys = {
        "responder": [r for _ in attrs for r in responders],
        "attribute": [a for a in attrs for _ in responders],
    }
    return _frame(keys, estimated, judges, design)


def differences_table(
    arrays: CellArrays,
    *,
    judges: Sequence[str],
    attributes: Sequence[str],
    alpha: float = 0.05,
    interval: str = INTERVAL,
    bounds: tuple[float, float] = (1.0, 5.0),
    design: str = "",
) -> pd.DataFrame:
    """The same estimator on paired differences Y_A − Y_B with f_A − f_B, one row per
    responder pair × attribute (columns ``responder_a``, ``responder_b``, then as
    :func:`means_table`): "A beats B on Safety according to clinicians" when ci_low > 0."""
    attrs, responders, y, f, attr_idx, listed_r = _cell_arrays(arrays, attributes)
    a_idx, b_idx = np.triu_indices(len(responders), k=1)
    n_p = a_idx.size
    dy = y[:, a_idx] - y[:, b_idx]  # NaN wherever either side is missing
    dfj = f[:, a_idx] - f[:, b_idx]
    cell = (attr_idx[:, None] * n_p + np.arange(n_p)[None, :]).ravel()
    listed = (listed_r[:, a_idx] & listed_r[:, b_idx]).ravel()
    out_of = _excluded(arrays, len(responders))
    excluded = np.tile(out_of[a_idx] | out_of[b_idx], len(attrs))
    span = bounds[1] - bounds[0]
    n_cells = len(attrs) * n_p
    # The scale's ends bound each side of a difference: its correction adds the two means'
    # (on the rows where both sides are rated and listed, the difference's own observations).
    rated = listed & np.isfinite(dy.ravel())
    correction = None
    if interval == "bounded":
        sides = [
            ppi.bounded_shift_and_variance(
                y=side.ravel()[rated], cell=cell[rated], n_cells=n_cells, bounds=bounds
            )
            for side in (y[:, a_idx], y[:, b_idx])
        ]
        correction = (sides[0][0] - sides[1][0], sides[0][1] + sides[1][1])
    estimated = _estimate(
        dy.ravel(), dfj.ravel(), listed, cell, n_cells, alpha, interval, (-span, span),
        excluded, correction,
    )  # fmt: skip
    keys = {
        "responder_a": [responders[a] for _ in attrs for a in a_idx],
        "responder_b": [responders[b] for _ in attrs for b in b_idx],
        "attribute": [a for a in attrs for _ in range(n_p)],
    }
    out = _frame(keys, estimated, judges, design)
    out["p_holm"] = _holm_by_attribute(out, interval)
    return out


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error at most alpha when the adjusted
    p < alpha); NaN stays NaN and is not counted in the family."""
    p = np.asarray(p, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out[order] = np.minimum(stepped, 1.0)
    return out


def _holm_by_attribute(differences: pd.DataFrame, interval: str) -> np.ndarray:
    """Two-sided p of "difference = 0" per pair (the interval's own t or normal reference),
    Holm-adjusted over all pairs of the same attribute."""
    from scipy import special  # see analysis.ppi.z_value

    est, se = differences["estimate"].to_numpy(float), differences["se"].to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        stat = np.abs(est) / se
        # se 0: every labelled difference is the same number, so the test is decided by it.
        stat = np.where(se == 0, np.where(est != 0, np.inf, 0.0), stat)
        if interval != "z":
            dof = np.maximum(differences["n_labelled"].to_numpy(float) - 1, 1)
            raw = 2 * special.stdtr(dof, -stat)
        else:
            raw = 2 * special.ndtr(-stat)
    adjusted = np.full(len(differences), np.nan)
    for rows in differences.groupby("attribute", sort=False).indices.values():
        adjusted[rows] = holm(raw[rows])
    return adjusted


def ranking_table(
    means: pd.DataFrame, differences: pd.DataFrame, *, alpha: float = 0.05
) -> pd.DataFrame:
    """Responders ranked per attribute by the judge-assisted estimate; ``separated_from_next``
    says whether this place and the next one differ once all pairs of the attribute are
    compared at once (Holm-adjusted p < alpha: with ten responders an attribute has 45 pairs,
    and 45 unadjusted 95 % intervals would call about two of them separated by chance).

    A responder whose estimate is not estimable gets no place (``place`` None, after the ranked
    ones, with the cell's ``warning`` as ``reason``): a number that is not there is not ranked.
    """
    diff = {
        (row.attribute, row.responder_a, row.responder_b): row.p_holm
        for row in differences.itertuples(index=False)
    }
    rows = []
    for attribute, group in means.groupby("attribute", sort=False):
        estimable = group[np.isfinite(group["estimate"].to_numpy(dtype=float))]
        ranked = estimable.sort_values("estimate", ascending=False).reset_index(drop=True)
        for place, row in ranked.iterrows():
            separated: bool | None = None
            if place + 1 < len(ranked):
                nxt = ranked.loc[place + 1, "responder"]
                p = diff.get((attribute, row.responder, nxt), np.nan)
                if np.isnan(p):
                    p = diff.get((attribute, nxt, row.responder), np.nan)
                separated = None if np.isnan(p) else bool(p < alpha)
            rows.append(
                {
                    "attribute": attribute,
                    "place": place + 1,
                    "responder": row.responder,
                    "estimate": row.estimate,
                    "ci_low": row.ci_low,
                    "ci_high": row.ci_high,
                    "separated_from_next": separated,
                    "reason": "",
                }
            )
        for row in group[~group.index.isin(estimable.index)].itertuples(index=False):
            rows.append(
                {
                    "attribute": attribute,
                    "place": None,
                    "responder": row.responder,
                    "estimate": row.estimate,
                    "ci_low": row.ci_low,
                    "ci_high": row.ci_high,
                    "separated_from_next": None,
                    "reason": row.warning or "not estimable",
                }
            )
    return pd.DataFrame(rows, columns=list(RANKING_COLUMNS))


RANKING_COLUMNS: tuple[str, ...] = (
    "attribute",
    "place",
    "responder",
    "estimate",
    "ci_low",
    "ci_high",
    "separated_from_next",
    "reason",
)


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
        ranked = group[group["place"].notna()].sort_values("place").reset_index(drop=True)
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
