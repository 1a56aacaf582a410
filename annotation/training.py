"""Rater training: practice conversations with reference scores, a pass rule, results.

An admin marks some conversations of a rating study as practice and gives each of their
responses a reference score per attribute (typed on the training page or imported from a CSV).
Clinicians given the practice conversations rate them first: their real work stays out of their
queue until they pass. After each practice conversation a clinician sees their scores beside the
reference and the anchors. When the last one is submitted the outcome is recorded against the
study's pass rule (mean absolute difference at most X, no score Y or more away); an admin may
let a clinician through by hand.

Practice ratings are ordinary `Rating` rows on practice conversations, so the rating page and
autosave need nothing special; every reader of study data excludes them (annotation/analysed.py).
"""

from __future__ import annotations

import csv
import io
import random
from dataclasses import dataclass, field

import numpy as np
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q

from .models import (
    Assignment,
    AssignmentItem,
    Attribute,
    AttributeLevel,
    CalibrationSettings,
    Conversation,
    Rater,
    Rating,
    ReferenceScore,
    Response,
    Score,
    Study,
    TrainingOutcome,
)
from .presentation import presentation_items
from .rater_codes import rater_codes_assign

REFERENCE_COLUMNS = ("conversation", "responder", "attribute", "score")


class ReferenceProblems(ValueError):
    """Reference scores that cannot be stored, each saying where; nothing was written."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        super().__init__("; ".join(problems[:10]) + more)


# --- Settings ------------------------------------------------------------------------------------


def calibration_settings_get(*, study: Study) -> CalibrationSettings:
    """The study's settings, or the defaults (unsaved) where it has none."""
    found = CalibrationSettings.objects.filter(study=study).first()
    return found or CalibrationSettings(study=study)


@transaction.atomic
def calibration_settings_set(
    *,
    study: Study,
    pass_mean_abs_diff: float,
    pass_max_diff: int,
    retest_count: int,
    retest_gap: int,
) -> CalibrationSettings:
    if pass_mean_abs_diff < 0:
        raise ValueError("the pass rule's mean absolute difference cannot be negative")
    if pass_max_diff < 1:
        raise ValueError("the pass rule's largest difference must be at least 1")
    if retest_count < 0:
        raise ValueError("the number of repeats cannot be negative")
    if retest_gap < 1:
        raise ValueError("repeats need at least one other conversation in between")
    settings, _ = CalibrationSettings.objects.update_or_create(
        study=study,
        defaults={
            "pass_mean_abs_diff": pass_mean_abs_diff,
            "pass_max_diff": pass_max_diff,
            "retest_count": retest_count,
            "retest_gap": retest_gap,
        },
    )
    return settings


# --- Practice conversations and reference scores -------------------------------------------------


@transaction.atomic
def practice_conversations_mark(*, study: Study, external_ids: list[str]) -> list[Conversation]:
    """Make these conversations practice material. Refused (nothing changed) for a conversation
    that is already real work: assigned for rating, or rated by anyone (clinician or judge)."""
    if study.kind != Study.Kind.RESPONSE_RATING:
        raise ValueError("practice conversations belong to response-rating studies")
    wanted = list(dict.fromkeys(e.strip() for e in external_ids if e.strip()))
    if not wanted:
        raise ValueError("name at least one conversation (its id in the study)")
    found = {
        c.external_id: c
        for c in Conversation.objects.select_for_update().filter(
            study=study, external_id__in=wanted
        )
    }
    unknown = [e for e in wanted if e not in found]
    if unknown:
        raise ValueError(f"not a conversation of {study.name!r}: {', '.join(unknown)}")
    ids = [c.pk for c in found.values()]
    used = set(
        Assignment.objects.filter(conversation_id__in=ids)
        .exclude(kind=Assignment.Kind.PRACTICE)
        .values_list("conversation__external_id", flat=True)
    ) | set(
        Rating.objects.filter(
            response__conversation_id__in=ids, response__conversation__practice=False
        ).values_list("response__conversation__external_id", flat=True)
    )
    if used:
        raise ValueError(
            "already assigned or rated as real work, so it cannot become practice: "
            + ", ".join(sorted(used))
        )
    Conversation.objects.filter(pk__in=ids).update(practice=True)
    return [found[e] for e in wanted]


def reference_csv_rows(
    *, text: str, file: str = "the file"
) -> list[tuple[int, str, str, str, str]]:
    """(row number, conversation, responder, attribute, score) from a reference-score CSV with
    the header conversation,responder,attribute,score. Raises ReferenceProblems naming the row."""
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    header = [h.strip().lower() for h in next(reader, [])]
    missing = [c for c in REFERENCE_COLUMNS if c not in header]
    if missing:
        raise ReferenceProblems(
            [
                f"{file}, row 1: the header lacks {', '.join(missing)} "
                f"(expected {','.join(REFERENCE_COLUMNS)})"
            ]  # fmt: skip
        )
    index = [header.index(c) for c in REFERENCE_COLUMNS]
    rows: list[tuple[int, str, str, str, str]] = []
    problems: list[str] = []
    for number, row in enumerate(reader, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) < len(header):
            problems.append(f"{file}, row {number}: {len(row)} cells, expected {len(header)}")
            continue
        conversation, responder, attribute, score = (row[i].strip() for i in index)
        rows.append((number, conversation, responder, attribute, score))
    if problems:
        raise ReferenceProblems(problems)
    if not rows:
        raise ReferenceProblems([f"{file}: no reference scores below the header"])
    return rows


@transaction.atomic
def reference_scores_set(
    *,
    study: Study,
    rows: list[tuple[int, str, str, str, str]],
    user: User | None,
    file: str = "the form",
) -> int:
    """Store reference scores given as (row, conversation id, responder key, attribute name,
    score). Every row is checked first; any problem raises ReferenceProblems naming the row and
    column, and nothing is written. A score already stored for the same cell is replaced."""
    responses = {
        (ext, key): pk
        for pk, ext, key in Response.objects.filter(
            conversation__study=study, conversation__practice=True
        ).values_list("id", "conversation__external_id", "responder__key")
    }
    practice = set(e for e, _ in responses)
    attributes = {a.name: a for a in Attribute.objects.filter(rubric_id=study.rubric_id)}
    levels = set(
        AttributeLevel.objects.filter(attribute__rubric_id=study.rubric_id).values_list(
            "attribute_id", "value"
        )
    )
    problems: list[str] = []
    cells: dict[tuple[int, int], int] = {}
    for row, ext, key, name, raw in rows:
        where = f"{file}, row {row}"
        if ext not in practice:
            problems.append(f"{where}, conversation: {ext!r} is not a practice conversation of "
                            f"{study.name!r}")  # fmt: skip
            continue
        response_id = responses.get((ext, key))
        if response_id is None:
            problems.append(f"{where}, responder: conversation {ext!r} has no {key!r} response")
            continue
        attribute = attributes.get(name)
        if attribute is None:
            problems.append(f"{where}, attribute: {name!r} is not an attribute of the rubric")
            continue
        try:
            value = int(raw)
        except ValueError:
            problems.append(f"{where}, score: {raw!r} is not a whole number")
            continue
        if (attribute.pk, value) not in levels:
            problems.append(f"{where}, score: {value} is not on the {name} scale")
            continue
        if (response_id, attribute.pk) in cells:
            problems.append(f"{where}: a second score for {ext}/{key}/{name}")
            continue
        cells[(response_id, attribute.pk)] = value
    if problems:
        raise ReferenceProblems(problems)
    ReferenceScore.objects.bulk_create(
        [
            ReferenceScore(response_id=r, attribute_id=a, value=v, set_by=user)
            for (r, a), v in cells.items()
        ],
        update_conflicts=True,
        unique_fields=["response", "attribute"],
        update_fields=["value", "set_by", "set_at"],
    )
    return len(cells)


def practice_ready(*, study: Study) -> tuple[list[int], list[str]]:
    """Ids of the practice conversations whose every response has a reference for every
    attribute, and the external ids of those that do not yet."""
    n_attributes = Attribute.objects.filter(rubric_id=study.rubric_id).count()
    ready, incomplete = [], []
    for conversation in Conversation.objects.filter(study=study, practice=True).order_by("id"):
        responses = Response.objects.filter(conversation=conversation).exclude(text="")
        have = ReferenceScore.objects.filter(response__in=responses).count()
        if responses.exists() and have == responses.count() * n_attributes:
            ready.append(conversation.pk)
        else:
            incomplete.append(conversation.external_id)
    return ready, incomplete


@transaction.atomic
def practice_assign(
    *, study: Study, clinicians: list[Rater], seed_rng: random.Random | None = None
) -> list[Assignment]:
    """Give each clinician every practice conversation with complete references that they do
    not have yet. Their real work in the study waits in their queue until they pass."""
    if not clinicians or any(c.kind != Rater.Kind.CLINICIAN for c in clinicians):
        raise ValueError("choose one or more clinicians")
    ready, incomplete = practice_ready(study=study)
    if not ready:
        why = f" (missing references: {', '.join(incomplete)})" if incomplete else ""
        raise ValueError("no practice conversation has reference scores for every response"
                         f" and attribute yet{why}")  # fmt: skip
    have = set(
        Assignment.objects.filter(
            conversation_id__in=ready, kind=Assignment.Kind.PRACTICE
        ).values_list("rater_id", "conversation_id")
    )
    responses: dict[int, list[int]] = {}
    for pk, conversation_id in (
        Response.objects.filter(conversation_id__in=ready)
        .exclude(text="")
        .values_list("id", "conversation_id")
    ):
        responses.setdefault(conversation_id, []).append(pk)
    new = []
    for clinician in clinicians:
        for conversation_id in ready:
            if (clinician.pk, conversation_id) in have:
                continue
            assignment = Assignment(
                rater=clinician, conversation_id=conversation_id, kind=Assignment.Kind.PRACTICE
            )
            if seed_rng is not None:
                assignment.seed = seed_rng.getrandbits(63)
            new.append(assignment)
    Assignment.objects.bulk_create(new)
    AssignmentItem.objects.bulk_create(
        item for a in new for item in presentation_items(a, responses[a.conversation_id])
    )
    # Practice is work in the study: the clinician has joined it (their study code).
    rater_codes_assign(study_id=study.pk, rater_ids={a.rater_id for a in new})
    return new


# --- The pass rule --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    scores: int
    mean_abs_diff: float | None
    max_diff: int | None
    passed: bool


def training_compare(
    ours: np.ndarray, reference: np.ndarray, *, max_mean_abs_diff: float, max_diff: int
) -> Comparison:
    """Compare paired scores with their references: passed when the mean absolute difference is
    at most `max_mean_abs_diff` and no score is `max_diff` or more away. No pairs: not passed."""
    ours = np.asarray(ours, dtype=np.float64)
    reference = np.asarray(reference, dtype=np.float64)
    if ours.size == 0:
        return Comparison(scores=0, mean_abs_diff=None, max_diff=None, passed=False)
    diff = np.abs(ours - reference)
    mad, worst = float(diff.mean()), int(diff.max())
    return Comparison(
        scores=int(ours.size),
        mean_abs_diff=mad,
        max_diff=worst,
        # A tolerance: 0.75 typed by an admin must accept a mean of exactly 0.75.
        passed=mad <= max_mean_abs_diff + 1e-9 and worst < max_diff,
    )


def _practice_pairs(*, study: Study, rater_id: int, conversation_id: int | None = None):
    """(our score, reference) of the rater's complete practice ratings in the study."""
    rows = Score.objects.filter(
        rating__rater_id=rater_id,
        rating__status=Rating.Status.COMPLETE,
        rating__response__conversation__study=study,
        rating__response__conversation__practice=True,
        rating__run__isnull=True,
    )
    if conversation_id is not None:
        rows = rows.filter(rating__response__conversation_id=conversation_id)
    references = {
        (r, a): v
        for r, a, v in ReferenceScore.objects.filter(
            response__conversation__study=study
        ).values_list("response_id", "attribute_id", "value")
    }
    pairs = [
        (value, references[(response_id, attribute_id)])
        for response_id, attribute_id, value in rows.values_list(
            "rating__response_id", "attribute_id", "value"
        )
        if (response_id, attribute_id) in references
    ]
    return np.array(pairs, dtype=np.float64).reshape(-1, 2)


@transaction.atomic
def training_outcome_record(*, study: Study, rater: Rater) -> TrainingOutcome | None:
    """Record the rater's outcome once all their practice conversations are submitted (None
    before). A clinician an admin let through stays through."""
    practice = Assignment.objects.filter(
        rater=rater, conversation__study=study, kind=Assignment.Kind.PRACTICE
    ).exclude(status=Assignment.Status.RECLAIMED)
    if not practice.exists() or practice.exclude(status=Assignment.Status.SUBMITTED).exists():
        return None
    rule = calibration_settings_get(study=study)
    pairs = _practice_pairs(study=study, rater_id=rater.pk)
    result = training_compare(
        pairs[:, 0],
        pairs[:, 1],
        max_mean_abs_diff=rule.pass_mean_abs_diff,
        max_diff=rule.pass_max_diff,
    )
    outcome = TrainingOutcome.objects.select_for_update().filter(study=study, rater=rater).first()
    if outcome is None:
        outcome = TrainingOutcome(study=study, rater=rater)
    outcome.mean_abs_diff, outcome.max_diff = result.mean_abs_diff, result.max_diff
    outcome.scores = result.scores
    outcome.passed = result.passed or outcome.decided_by_id is not None
    outcome.save()
    return outcome


@transaction.atomic
def training_let_through(*, study: Study, rater: Rater, user: User) -> TrainingOutcome:
    """An admin's decision that a clinician may start real work (recorded with who decided)."""
    outcome, _ = TrainingOutcome.objects.select_for_update().get_or_create(
        study=study, rater=rater, defaults={"passed": True, "decided_by": user}
    )
    outcome.passed, outcome.decided_by = True, user
    outcome.save(update_fields=["passed", "decided_by", "decided_at"])
    return outcome


# --- Reads ----------------------------------------------------------------------------------------


def waiting_for_training_q(*, user) -> Q:
    """Open assignments of `user` held back because they have practice work in that study and
    have not passed it yet (an Assignment filter; practice itself is never held back)."""
    passed = TrainingOutcome.objects.filter(rater__user_id=user.pk, passed=True).values("study_id")
    in_training = (
        Assignment.objects.filter(rater__user_id=user.pk, kind=Assignment.Kind.PRACTICE)
        .exclude(conversation__study_id__in=passed)
        .values("conversation__study_id")
    )
    # Only open work waits: what the clinician submitted before the practice was given stays
    # theirs to look at.
    return (
        ~Q(kind=Assignment.Kind.PRACTICE)
        & Q(conversation__study_id__in=in_training)
        & Q(status__in=Assignment.OPEN_STATUSES)
    )


@dataclass
class FeedbackCell:
    attribute: str
    yours: int | None
    reference: int
    your_anchor: str
    reference_anchor: str

    @property
    def diff(self) -> int | None:
        return None if self.yours is None else abs(self.yours - self.reference)


@dataclass
class FeedbackItem:
    label: str
    text: str
    cells: list[FeedbackCell] = field(default_factory=list)


@dataclass
class FeedbackPage:
    assignment: Assignment
    context: str
    items: list[FeedbackItem]
    comparison: Comparison
    rule: CalibrationSettings
    practice_left: int  # the clinician's practice conversations not yet submitted
    outcome: TrainingOutcome | None


def practice_feedback(*, assignment: Assignment) -> FeedbackPage:
    """A submitted practice conversation: the clinician's scores beside the references, with the
    anchors of both. Names responses by their label only (blinding holds in training too)."""
    study = assignment.conversation.study
    attributes = list(
        Attribute.objects.filter(rubric_id=study.rubric_id)
        .prefetch_related("levels")
        .order_by("position")
    )
    anchors = {(a.pk, lv.value): lv.anchor for a in attributes for lv in a.levels.all()}
    items = list(assignment.items.order_by("position").values("position", "response_id",
                                                                "response__text"))  # fmt: skip
    response_ids = [i["response_id"] for i in items]
    references = {
        (r, a): v
        for r, a, v in ReferenceScore.objects.filter(response_id__in=response_ids).values_list(
            "response_id", "attribute_id", "value"
        )
    }
    yours = {
        (r, a): v
        for r, a, v in Score.objects.filter(
            rating__rater_id=assignment.rater_id,
            rating__response_id__in=response_ids,
            rating__run__isnull=True,
            rating__repeat=0,
        ).values_list("rating__response_id", "attribute_id", "value")
    }
    views = []
    for item in items:
        view = FeedbackItem(
            label=AssignmentItem(position=item["position"]).label, text=item["response__text"]
        )
        for a in attributes:
            reference = references.get((item["response_id"], a.pk))
            if reference is None:
                continue
            mine = yours.get((item["response_id"], a.pk))
            view.cells.append(
                FeedbackCell(
                    attribute=a.name,
                    yours=mine,
                    reference=reference,
                    your_anchor=anchors.get((a.pk, mine), "") if mine is not None else "",
                    reference_anchor=anchors.get((a.pk, reference), ""),
                )
            )
        views.append(view)
    rule = calibration_settings_get(study=study)
    pairs = _practice_pairs(
        study=study, rater_id=assignment.rater_id, conversation_id=assignment.conversation_id
    )
    return FeedbackPage(
        assignment=assignment,
        context=assignment.conversation.context,
        items=views,
        comparison=training_compare(
            pairs[:, 0],
            pairs[:, 1],
            max_mean_abs_diff=rule.pass_mean_abs_diff,
            max_diff=rule.pass_max_diff,
        ),
        rule=rule,
        practice_left=Assignment.objects.filter(
            rater_id=assignment.rater_id,
            conversation__study=study,
            kind=Assignment.Kind.PRACTICE,
            status__in=Assignment.OPEN_STATUSES,
        ).count(),
        outcome=TrainingOutcome.objects.filter(study=study, rater_id=assignment.rater_id).first(),
    )


@dataclass
class TrainingRow:
    rater: Rater
    assigned: int
    submitted: int
    comparison: Comparison
    outcome: TrainingOutcome | None


@dataclass
class PracticeConversationRow:
    conversation: Conversation
    responses: int
    references: int
    needed: int


def training_overview(*, study: Study) -> tuple[list[PracticeConversationRow], list[TrainingRow]]:
    """The study's practice conversations (how complete their references are) and each
    clinician's training so far, compared with the study's pass rule."""
    n_attributes = Attribute.objects.filter(rubric_id=study.rubric_id).count()
    conversations = []
    for c in Conversation.objects.filter(study=study, practice=True).order_by("id"):
        responses = Response.objects.filter(conversation=c).exclude(text="").count()
        conversations.append(
            PracticeConversationRow(
                conversation=c,
                responses=responses,
                references=ReferenceScore.objects.filter(response__conversation=c).count(),
                needed=responses * n_attributes,
            )
        )
    rule = calibration_settings_get(study=study)
    outcomes = {o.rater_id: o for o in TrainingOutcome.objects.filter(study=study)}
    rows = []
    practice = Assignment.objects.filter(conversation__study=study, kind=Assignment.Kind.PRACTICE)
    raters = Rater.objects.filter(pk__in=practice.values("rater_id")).order_by("name")
    for rater in raters:
        mine = practice.filter(rater=rater)
        pairs = _practice_pairs(study=study, rater_id=rater.pk)
        rows.append(
            TrainingRow(
                rater=rater,
                assigned=mine.count(),
                submitted=mine.filter(status=Assignment.Status.SUBMITTED).count(),
                comparison=training_compare(
                    pairs[:, 0],
                    pairs[:, 1],
                    max_mean_abs_diff=rule.pass_mean_abs_diff,
                    max_diff=rule.pass_max_diff,
                ),
                outcome=outcomes.get(rater.pk),
            )
        )
    return conversations, rows
