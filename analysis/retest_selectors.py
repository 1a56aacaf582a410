"""Reads for test-retest and drift: clinicians' first and repeat scores as arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.db.models import QuerySet

from analysis.retest import DriftBlock, RetestAgreement, consensus_drift, retest_agreement
from annotation.feedback_selectors import overruled_by_rater
from annotation.models import Assignment, Rater, Rating, Score, Study

DRIFT_BLOCK = 10


@dataclass
class RaterCalibration:
    rater: Rater
    repeats_assigned: int
    repeats_done: int
    retest: RetestAgreement
    drift: list[DriftBlock]
    # Of the clinician's scores on adjudicated pairs, how many the final score differs from
    # (annotation.feedback_selectors; the clinician sees them on their feedback page).
    overruled: int = 0
    adjudicated: int = 0


def _scores(study: Study) -> QuerySet[Score, tuple[int, int, int, int, int, int]]:
    return Score.objects.filter(
        rating__response__conversation__study=study,
        rating__response__conversation__practice=False,
        rating__status=Rating.Status.COMPLETE,
        rating__run__isnull=True,
        rating__rater__kind=Rater.Kind.CLINICIAN,
    ).values_list(
        "rating__rater_id",
        "rating__response_id",
        "rating__response__conversation_id",
        "attribute_id",
        "rating__repeat",
        "value",
    )


def study_calibration(*, study: Study, block: int = DRIFT_BLOCK) -> list[RaterCalibration]:
    """Per clinician with real work in the study: test-retest agreement, drift from the
    other clinicians' consensus, per block of `block` conversations in submission order, and
    how many of their scores an adjudicator set otherwise."""
    rows = np.array(list(_scores(study)), dtype=np.int64).reshape(-1, 6)
    rater, response, conversation, attribute, repeat, value = rows.T
    rubric = study.rubric
    labels = range(rubric.scale_min, rubric.scale_max + 1)
    first = repeat == 0
    # Repeat pairs: (rater, response, attribute) present as first and as repeat.
    key = np.stack([rater, response, attribute], axis=1)
    firsts = {tuple(k): v for k, v in zip(key[first], value[first], strict=True)}
    # Consensus per (response, attribute) from first ratings: sum and count, to leave one out.
    cells: dict[tuple[int, int], list[float]] = {}
    for r, a, v in zip(response[first], attribute[first], value[first], strict=True):
        entry = cells.setdefault((int(r), int(a)), [0.0, 0])
        entry[0] += v
        entry[1] += 1
    # Part 0 only: a top-up part (responses added later) is no new conversation nor repeat.
    assignments = Assignment.objects.filter(conversation__study=study, part=0).exclude(
        status=Assignment.Status.RECLAIMED
    )
    submitted_order: dict[int, dict[int, int]] = {}
    for rater_id, conversation_id in (
        assignments.filter(kind=Assignment.Kind.RATING, status=Assignment.Status.SUBMITTED)
        .order_by("submitted_at", "id")
        .values_list("rater_id", "conversation_id")
    ):
        mine = submitted_order.setdefault(rater_id, {})
        mine[conversation_id] = len(mine)
    retests = assignments.filter(kind=Assignment.Kind.RETEST)
    overruled = overruled_by_rater(study=study)
    out = []
    clinicians = Rater.objects.filter(
        pk__in=assignments.filter(kind=Assignment.Kind.RATING).values("rater_id")
    ).order_by("name")
    for clinician in clinicians:
        mask = (rater == clinician.pk) & ~first
        pairs = [
            (firsts[k], v)
            for k, v in zip(map(tuple, key[mask]), value[mask], strict=True)
            if k in firsts
        ]
        pairs_arr = np.array(pairs, dtype=np.float64).reshape(-1, 2)
        order, own, consensus = [], [], []
        positions = submitted_order.get(clinician.pk, {})
        mine = (rater == clinician.pk) & first
        for r, c, a, v in zip(response[mine], conversation[mine], attribute[mine], value[mine],
                              strict=True):  # fmt: skip
            total, n = cells[(int(r), int(a))]
            if n < 2 or int(c) not in positions:
                continue  # nobody else rated it, or not submitted through an assignment
            order.append(positions[int(c)])
            own.append(v)
            consensus.append((total - v) / (n - 1))
        mine_retests = retests.filter(rater=clinician)
        out.append(
            RaterCalibration(
                rater=clinician,
                repeats_assigned=mine_retests.count(),
                repeats_done=mine_retests.filter(status=Assignment.Status.SUBMITTED).count(),
                retest=retest_agreement(pairs_arr[:, 0], pairs_arr[:, 1], labels=labels),
                drift=consensus_drift(order, own, consensus, block=block),
                overruled=overruled.get(clinician.pk, (0, 0))[0],
                adjudicated=overruled.get(clinician.pk, (0, 0))[1],
            )
        )
    return out
