"""Judge-assisted clinician means per responder × attribute, from the long scores frame.

Pure pandas/numpy (no Django), like analysis.reports: a selector hands in the frame, the
statistics come from :mod:`analysis.ppi`. See docs/judge-assisted.md.

For a responder × attribute cell and conversation i:

- Y_i is the mean of the clinicians' scores of the response (missing if no clinician scored it);
- f_i is the mean of the chosen judges' scores. A judge that must not score this responder
  (self-preference exclusion, as in the reliability report) does not count; every other chosen
  judge must have a valid score, or the conversation is left out of the cell (never guessed).

The *labelled* conversations are the clinicians' sample: by default every conversation with at
least one clinician score, or an explicit ``labelled`` set of conversation ids (a stored sampling
design or ``--labelled FILE``). The estimand is the clinician mean over the responses of the
study that clinicians were meant to rate. Per cell, a response of a labelled conversation is

- *labelled* when it has Y_i and f_i;
- *non-response* when the judges scored it but no clinician did: it is in neither pool (treating
  it as unlabelled would let the judges' scores stand in for exactly the responses clinicians
  chose not to rate), it is counted (``n_nonresponse``), and when the judges score the
  non-responded responses clearly differently from the rated ones (:func:`nonresponse_warned`)
  the cell carries a warning and uses the clinician-only estimate (see :func:`_estimate`);
- left out of the cell when clinicians scored it but a chosen judge did not (never guessed).

Every response of a conversation outside the sample with f_i is *unlabelled*, even where
clinicians rated it (so that a study can be re-analysed as if only its sample had been rated).
"""

from __future__ import annotations

import dataclasses
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
EXTRA_COLUMNS: tuple[str, ...] = (
    "se",
    "clinician_only_se",
    "ratings_saved",
    "judges",
    "n_nonresponse",
    "nonresponse_judge_gap",
    "interval",
    "warning",
)
#: Welch's test level at which non-responded responses count as scored "clearly differently".
NONRESPONSE_ALPHA = 0.05
#: ... and the share of the interval's half-width the judges' gap must be able to shift the
#: estimate by. A bias of a tenth of the half-width lowers a 95 % interval's coverage to about
#: 94.5 %; smaller shifts are noise next to the interval itself.
NONRESPONSE_SHIFT = 0.10


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
    return CellArrays(y=y, f=f, labelled=np.repeat(listed, n_a))


@dataclass(frozen=True)
class Nonresponse:
    """Per cell: responses of labelled conversations scored by the judges but not by
    clinicians, and how the judges' mean on them differs from that on the labelled ones."""

    n: np.ndarray
    judge_gap: np.ndarray  # mean f (non-responded) − mean f (labelled)
    differs: np.ndarray  # bool: Welch's test rejects equal judge means
    n_labelled: np.ndarray

    def shift(self) -> np.ndarray:
        """How far the estimate would move if clinicians scored the non-responded responses
        as far from the rated ones as the judges do: |gap| × share of non-response."""
        with np.errstate(invalid="ignore", divide="ignore"):
            shift: np.ndarray = np.abs(self.judge_gap) * self.n / (self.n + self.n_labelled)
        return shift


def _nonresponse(
    f_lab: np.ndarray, cell_lab: np.ndarray, f_nr: np.ndarray, cell_nr: np.ndarray, n: int
) -> Nonresponse:
    from scipy import special  # lazily, and not scipy.stats: see analysis.ppi.z_value

    def moments(values: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, ...]:
        count = ppi.cell_sums(cells, np.ones(values.shape), n)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = ppi.cell_sums(cells, values, n) / count
            ss = ppi.cell_sums(cells, (values - mean[cells]) ** 2, n)
            return count, mean, ss / (count - 1)

    n_l, m_l, v_l = moments(f_lab, cell_lab)
    n_n, m_n, v_n = moments(f_nr, cell_nr)
    with np.errstate(invalid="ignore", divide="ignore"):
        se2_l, se2_n = v_l / n_l, v_n / n_n
        se = np.sqrt(se2_l + se2_n)
        welch_df = (se2_l + se2_n) ** 2 / (se2_l**2 / (n_l - 1) + se2_n**2 / (n_n - 1))
        gap = m_n - m_l
        p = 2 * special.stdtr(welch_df, -np.abs(gap) / se)
        # Judges constant within both groups but apart (se 0): as clear as a difference gets.
        p = np.where((se == 0) & (gap != 0), 0.0, p)
    testable = (n_l >= 2) & (n_n >= 2)
    differs = testable & (np.nan_to_num(p, nan=1.0) < NONRESPONSE_ALPHA)
    return Nonresponse(
        n=n_n.astype(np.int64),
        judge_gap=np.where(n_n > 0, gap, np.nan),
        differs=differs,
        n_labelled=n_l.astype(np.int64),
    )


def nonresponse_warned(nonresp: Nonresponse, half_width: np.ndarray) -> np.ndarray:
    """A cell warns about non-response when the judges score the unrated responses clearly
    differently (Welch's test at NONRESPONSE_ALPHA) *and* that gap could shift the estimate by
    more than NONRESPONSE_SHIFT of the interval's half-width. Either alone is not enough: two
    unrated responses that the judges both give a 5 differ "significantly" from rated ones
    averaging 4.8, yet cannot move a mean over a thousand responses."""
    with np.errstate(invalid="ignore"):
        material = nonresp.shift() > NONRESPONSE_SHIFT * np.nan_to_num(half_width, nan=np.inf)
    warned: np.ndarray = nonresp.differs & material
    return warned


@dataclass(frozen=True)
class Estimated:
    est: ppi.CellEstimates
    nonresp: Nonresponse
    #: Cells whose judges say the unrated responses differ: clinician-only (see _estimate).
    warned: np.ndarray


def _estimate(
    y: np.ndarray, f: np.ndarray, listed: np.ndarray, cell: np.ndarray, n: int, alpha: float,
    interval: str,
) -> Estimated:  # fmt: skip
    """Split (y, f) observations into labelled / non-response / unlabelled per the module
    rules and estimate.

    Where the non-response is informative by the judges' own scores (nonresponse_warned), the
    cell falls back to the clinician-only estimate and interval (λ = 0): the unlabelled pool
    then holds responses that clinicians would not have rated either, which no design can
    tell apart, so the judges' mean over it would pull the estimate towards responses the
    clinician mean is not about (on MentalAlign, Qwen-2.5-7B: coverage 0.83 with the judges,
    0.95 clinician-only, docs/judge-assisted.md). The warning says so.
    """
    has_y, has_f = np.isfinite(y), np.isfinite(f)
    lab = listed & has_y & has_f
    nonresp = listed & ~has_y & has_f
    unl = ~listed & has_f
    est = ppi.ppi_mean_cells(
        y=y[lab], f=f[lab], cell=cell[lab], f_unlabelled=f[unl], cell_unlabelled=cell[unl],
        n_cells=n, alpha=alpha, interval=interval,
    )  # fmt: skip
    missing = _nonresponse(f[lab], cell[lab], f[nonresp], cell[nonresp], n)
    warned = nonresponse_warned(missing, est.ci_high - est.estimate)
    if warned.any():
        est = dataclasses.replace(
            est,
            estimate=np.where(warned, est.clinician_only_estimate, est.estimate),
            ci_low=np.where(warned, est.clinician_only_ci_low, est.ci_low),
            ci_high=np.where(warned, est.clinician_only_ci_high, est.ci_high),
            se=np.where(warned, est.clinician_only_se, est.se),
            lam=np.where(warned, 0.0, est.lam),
        )
    return Estimated(est=est, nonresp=missing, warned=warned)


def _warning(n: int, gap: float, warned: bool) -> str:
    if not warned:
        return ""
    way = "lower" if gap < 0 else "higher"
    return (
        f"clinicians left {n} response{'s' if n != 1 else ''} unrated that the judges score "
        f"{abs(gap):.2f} points {way} than the rated ones: the estimate assumes the unrated "
        "responses are like the rated ones, and the judges are not used for this cell "
        "(clinician-only)"
    )


def _frame(keys: dict[str, list[Any]], estimated: Estimated, judges: Sequence[str]) -> pd.DataFrame:
    est, nonresp = estimated.est, estimated.nonresp
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
            "n_nonresponse": nonresp.n,
            "nonresponse_judge_gap": nonresp.judge_gap,
            "interval": np.where(
                estimated.warned,
                f"{est.interval} (clinician-only: informative non-response)",
                est.interval,
            ),
            "warning": [
                _warning(int(k), float(g), bool(w))
                for k, g, w in zip(nonresp.n, nonresp.judge_gap, estimated.warned, strict=True)
            ],
        }
    )
    seen = (out["n_labelled"] > 0) | (out["n_unlabelled"] > 0) | (out["n_nonresponse"] > 0)
    return out[seen].reset_index(drop=True)


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


def means_table(
    arrays: CellArrays,
    *,
    judges: Sequence[str],
    attributes: Sequence[str],
    alpha: float = 0.05,
    interval: str = "t",
) -> pd.DataFrame:
    """One row per responder × attribute (rubric order), contract columns first."""
    attrs, responders, y, f, attr_idx, listed = _cell_arrays(arrays, attributes)
    n_r = len(responders)
    # cell code = attribute * n_r + responder, one observation per (row, responder)
    cell = (attr_idx[:, None] * n_r + np.arange(n_r)[None, :]).ravel()
    estimated = _estimate(
        y.ravel(), f.ravel(), listed.ravel(), cell, len(attrs) * n_r, alpha, interval
    )
    keys = {
        "responder": [r for _ in attrs for r in responders],
        "attribute": [a for a in attrs for _ in responders],
    }
    return _frame(keys, estimated, judges)


def differences_table(
    arrays: CellArrays,
    *,
    judges: Sequence[str],
    attributes: Sequence[str],
    alpha: float = 0.05,
    interval: str = "t",
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
    estimated = _estimate(dy.ravel(), dfj.ravel(), listed, cell, len(attrs) * n_p, alpha, interval)
    keys = {
        "responder_a": [responders[a] for _ in attrs for a in a_idx],
        "responder_b": [responders[b] for _ in attrs for b in b_idx],
        "attribute": [a for a in attrs for _ in range(n_p)],
    }
    out = _frame(keys, estimated, judges)
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
        if interval == "t":
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
    and 45 unadjusted 95 % intervals would call about two of them separated by chance)."""
    diff = {
        (row.attribute, row.responder_a, row.responder_b): row.p_holm
        for row in differences.itertuples(index=False)
    }
    rows = []
    for attribute, group in means.groupby("attribute", sort=False):
        ranked = group.sort_values("estimate", ascending=False).reset_index(drop=True)
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
