"""Reads for the judge-assisted estimates: a study's scores as the Y/f arrays of
analysis.judge_assisted.estimator."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import planner
from analysis.judge_assisted import estimator
from analysis.judge_assisted.estimator import CellArrays, ScoreCodes, cell_arrays, score_codes
from analysis.selectors import Filters, attribute_names, exclusions_for, scores_frame
from annotation.models import Conversation, Rater, Rating, Study
from annotation.selectors import clinician_sample_current, clinician_sample_external_ids


def judge_names(*, study: Study) -> list[str]:
    """The judges with at least one rating in the study, by name."""
    return sorted(
        Rater.objects.filter(kind=Rater.Kind.JUDGE, ratings__response__conversation__study=study)
        .values_list("name", flat=True)
        .distinct()
    )


def conversation_external_ids(*, study: Study) -> set[str]:
    return set(Conversation.objects.filter(study=study).values_list("external_id", flat=True))


def judge_assisted_codes(*, study: Study, judges: Sequence[str]) -> ScoreCodes:
    """The study's clinician scores and ``judges``' scores as integer codes, factorised once:
    hand them to analysis.judge_assisted.estimator.cell_arrays for every table built from them."""
    return score_codes(scores_frame(study=study, filters=Filters(judges=tuple(judges))))


def judge_assisted_arrays(
    *, study: Study, judges: Sequence[str], labelled: Collection[str] | None = None
) -> CellArrays:
    """Y (clinician mean) and f (mean of ``judges``) per response of the study, with the
    reliability report's self-preference exclusions; ``labelled`` as external ids."""
    return cell_arrays(
        judge_assisted_codes(study=study, judges=judges),
        judges=judges,
        attributes=attribute_names(study=study),
        exclusions=exclusions_for(study=study),
        labelled=labelled,
    )


class JudgeAssistedInputError(ValueError):
    """Bad input for a judge-assisted report; the message says what and where, on one line."""


@dataclass(frozen=True)
class JudgeAssistedReport:
    means: pd.DataFrame
    differences: pd.DataFrame
    ranking: pd.DataFrame
    planner: pd.DataFrame
    #: Per pair of adjacent places: difference, separated?, conversations needed to separate.
    adjacent: pd.DataFrame
    #: Per responder pair × attribute: conversations needed for the difference to exclude 0.
    separations: pd.DataFrame
    #: Per attribute: which lever narrows the ICC interval (only when asked: a bootstrap).
    icc_levers: pd.DataFrame | None = None
    #: Which conversations were the clinicians' sample, in words.
    design: str = ""


#: How the clinicians' sample is chosen when no explicit list is given.
DESIGNS = ("stored", "rated")
RATED_DESIGN = "every conversation with a clinician score"


def labelled_design(*, study: Study, design: str = "stored") -> tuple[set[str] | None, str]:
    """The labelled conversations (external ids; None: every clinician-rated one) and their
    description. ``stored``: the study's latest clinician sample when it has one; ``rated``:
    whatever clinicians rated (a study rated in full, or re-analysed without its design)."""
    if design not in DESIGNS:
        raise JudgeAssistedInputError(f"design must be one of {', '.join(DESIGNS)}, got {design!r}")
    sample = clinician_sample_current(study=study)
    if sample is None:
        return None, f"{RATED_DESIGN} (the study has no stored clinician sample)"
    if design == "rated":
        return None, f"{RATED_DESIGN} (chosen over the stored {sample.describe()})"
    return clinician_sample_external_ids(sample=sample), sample.describe()


def rated_conversation_ids(*, study: Study) -> set[str]:
    """External ids of the study's conversations with at least one clinician rating that
    counts as study data."""
    return set(
        Conversation.objects.filter(
            study=study,
            practice=False,
            responses__ratings__rater__kind=Rater.Kind.CLINICIAN,
            responses__ratings__status=Rating.Status.COMPLETE,
        )
        .values_list("external_id", flat=True)
        .distinct()
    )


def labelled_share(*, study: Study, share: int) -> tuple[set[str] | None, str]:
    """A seeded random share (percent) of the study's design, to show what a smaller clinician
    budget would give, and its description; (None, the design's) for 100 or more. The share is
    drawn from the design itself (its stored clinician sample, else the clinician-rated
    conversations): a random part of a random sample is still a random sample, while a share of
    every conversation would label conversations no clinician rated. The seed is fixed so that
    the same share picks the same conversations every time: a cached report and a fresh one
    agree."""
    ids, described = labelled_design(study=study)
    if share >= 100:
        return ids, described
    pool = sorted(ids if ids is not None else rated_conversation_ids(study=study))
    k = min(len(pool), max(2, round(len(pool) * share / 100)))
    picked = set(np.random.default_rng(0).choice(pool, size=k, replace=False).tolist())
    return picked, f"a seeded random {share} % ({k}) of {described}"


def judge_assisted_report(
    *,
    study: Study,
    judges: Sequence[str],
    labelled: Collection[str] | None = None,
    alpha: float = 0.05,
    target_half_width: float = 0.10,
    icc_lever: bool = False,
    design: str = "stored",
    described: str = "",
) -> JudgeAssistedReport:
    """Means, paired differences, ranking (with the separations of adjacent places) and
    planner for the chosen judges, on ``labelled`` conversations (external ids) or else the
    study's ``design`` (:func:`labelled_design`; ``described`` names a given ``labelled`` set,
    e.g. :func:`labelled_share`'s); with ``icc_lever`` also which lever narrows each
    attribute's ICC interval (a 1,000-resample bootstrap per attribute: about a second).

    Raises JudgeAssistedInputError for an unknown judge, a bad alpha or target, or when no
    conversation has both clinician scores and the judges' scores.
    """
    if not 0.0 < alpha < 1.0:
        raise JudgeAssistedInputError(f"alpha must be strictly between 0 and 1, got {alpha!r}")
    if not target_half_width > 0:
        raise JudgeAssistedInputError(
            f"the target half-width must be positive, got {target_half_width!r}"
        )
    judges = list(dict.fromkeys(judges))
    if not judges:
        raise JudgeAssistedInputError("choose at least one judge")
    known = judge_names(study=study)
    unknown = [j for j in judges if j not in known]
    if unknown:
        raise JudgeAssistedInputError(
            f"study {study.name!r} has no judge named {', '.join(map(repr, unknown))} "
            f"(judges: {', '.join(known) or 'none'})"
        )
    if labelled is None:
        labelled, described = labelled_design(study=study, design=design)
    elif not described:
        described = f"{len(set(labelled))} listed conversations"
    attributes = attribute_names(study=study)
    bounds = (float(study.rubric.scale_min), float(study.rubric.scale_max))
    arrays = judge_assisted_arrays(study=study, judges=judges, labelled=labelled)
    means = estimator.means_table(
        arrays, judges=judges, attributes=attributes, alpha=alpha, bounds=bounds,
        design=described,
    )  # fmt: skip
    if means.empty or not (means["n_labelled"] > means["n_judge_missing"]).any():
        raise JudgeAssistedInputError(
            f"study {study.name!r} has no conversation with both clinician scores and "
            f"scores by {' + '.join(judges)}"
        )
    differences = estimator.differences_table(
        arrays, judges=judges, attributes=attributes, alpha=alpha, bounds=bounds,
        design=described,
    )  # fmt: skip
    ranking = estimator.ranking_table(means, differences, alpha=alpha)
    separations = planner.separation_table(differences, alpha=alpha)
    levers = None
    if icc_lever:
        levers = planner.icc_lever_table(
            arrays.y, arrays.f, attributes=attributes, judges_label=" + ".join(judges)
        )
    return JudgeAssistedReport(
        means=means,
        differences=differences,
        ranking=ranking,
        planner=planner.planner_table(means, target_half_width=target_half_width, alpha=alpha),
        adjacent=estimator.adjacent_separations(ranking, differences, separations),
        separations=separations,
        icc_levers=levers,
        design=described,
    )
