"""Reads for the judge-assisted estimates: a study's scores as the Y/f arrays of
analysis.judge_assisted."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from analysis.judge_assisted import CellArrays, cell_arrays
from analysis.selectors import Filters, attribute_names, exclusions_for, scores_frame
from annotation.models import Conversation, Rater, Study


def judge_names(*, study: Study) -> list[str]:
    """The judges with at least one rating in the study, by name."""
    return sorted(
        Rater.objects.filter(kind=Rater.Kind.JUDGE, ratings__response__conversation__study=study)
        .values_list("name", flat=True)
        .distinct()
    )


def conversation_external_ids(*, study: Study) -> set[str]:
    return set(Conversation.objects.filter(study=study).values_list("external_id", flat=True))


def judge_assisted_arrays(
    *, study: Study, judges: Sequence[str], labelled: Collection[str] | None = None
) -> CellArrays:
    """Y (clinician mean) and f (mean of ``judges``) per response of the study, with the
    reliability report's self-preference exclusions; ``labelled`` as external ids."""
    df = scores_frame(study=study, filters=Filters(judges=tuple(judges)))
    return cell_arrays(
        df,
        judges=judges,
        attributes=attribute_names(study=study),
        exclusions=exclusions_for(study=study),
        labelled=labelled,
    )
