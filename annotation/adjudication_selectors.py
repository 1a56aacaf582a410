"""Reads for adjudication: the queue of disagreements, one response's adjudication page, and the
final score of every response and attribute with where it came from (docs/adjudication.md).

Only study data takes part: complete clinician ratings that count (annotation.analysed: no
practice, no repeats), never a judge's. What an adjudicator's template is given is built here
from plain values, clinicians named only as "Clinician A", "Clinician B", … per response, so a
template cannot reach a clinician's name or a responder's name or metadata by accident.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import (
    Avg,
    Count,
    F,
    IntegerField,
    Max,
    Min,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce
from django.http import Http404

from .analysed import analysed_ratings_q
from .models import (
    Adjudication,
    Assignment,
    AssignmentItem,
    Attribute,
    AttributeLevel,
    AttributeThreshold,
    Rater,
    Rating,
    Response,
    Score,
    Study,
)

ADJUDICATED = "adjudicated"
CONSENSUS = "clinician-consensus"
SINGLE = "single-clinician"
AWAITING = "awaiting-adjudication"
PROVENANCES = (ADJUDICATED, CONSENSUS, SINGLE, AWAITING)


def _counted_ratings(study: Study) -> QuerySet[Rating]:
    return Rating.objects.filter(
        analysed_ratings_q(),
        response__conversation__study=study,
        status=Rating.Status.COMPLETE,
        rater__kind=Rater.Kind.CLINICIAN,
        run__isnull=True,
    )


def _counted_scores(study: Study) -> QuerySet[Score]:
    return Score.objects.filter(rating__in=_counted_ratings(study))


def attribute_thresholds(*, study: Study) -> dict[int, int]:
    """Attribute id → the adjudication threshold that applies to it in ``study``: its own
    (AttributeThreshold) where the lead set one, else the study's. Every attribute of the
    study's rubric has an entry. One query."""
    overrides = dict(
        AttributeThreshold.objects.filter(study=study).values_list("attribute_id", "points")
    )
    return {
        pk: overrides.get(pk, study.adjudication_threshold)
        for pk in Attribute.objects.filter(rubric_id=study.rubric_id).values_list("pk", flat=True)
    }


def attribute_thresholds_by_name(*, study: Study) -> dict[str, int]:
    """attribute_thresholds keyed by attribute name, in rubric order (for the API and pages)."""
    thresholds = attribute_thresholds(study=study)
    return {
        name: thresholds[pk]
        for pk, name in Attribute.objects.filter(rubric_id=study.rubric_id)
        .order_by("position")
        .values_list("pk", "name")
    }


def _threshold_expression(study: Study) -> Coalesce:
    """SQL for the threshold of each row's attribute (by ``attribute_id``): its own where the
    lead set one, else the study's. A subquery, so the callers' query count does not grow."""
    own = AttributeThreshold.objects.filter(study=study, attribute_id=OuterRef("attribute_id"))
    return Coalesce(
        Subquery(own.values("points")[:1]),
        Value(study.adjudication_threshold),
        output_field=IntegerField(),
    )


def _spreads(scores: QuerySet[Score]) -> QuerySet:
    """(response, attribute) → lowest, highest, mean score and number of clinicians: one row
    per pair, computed by the database."""
    return (
        scores.values("rating__response_id", "attribute_id")
        .annotate(lo=Min("value"), hi=Max("value"), mean=Avg("value"), n=Count("rating_id"))
        .annotate(spread=F("hi") - F("lo"))
        .order_by()
    )


@dataclass(frozen=True)
class QueueRow:
    response_id: int
    conversation: str
    attribute_id: int
    attribute: str
    spread: int | None  # highest minus lowest clinician score; None: no clinician scored it
    n_clinicians: int
    flagged: bool
    adjudicated: bool


def _flagged_items(study: Study, response_id: int | None = None) -> QuerySet[AssignmentItem]:
    items = AssignmentItem.objects.filter(
        assignment__conversation__study=study,
        assignment__conversation__practice=False,
        assignment__status=Assignment.Status.FLAGGED,
    )
    return items if response_id is None else items.filter(response_id=response_id)


def adjudication_queue(*, study: Study, response_id: int | None = None) -> list[QueueRow]:
    """The (response, attribute) pairs an adjudicator settles: those whose clinicians' scores
    are the attribute's threshold (attribute_thresholds) apart or more, and every attribute of a
    response in a conversation a clinician flagged. Flagged first, then the widest disagreement
    first. Six queries whatever the study's size; ``response_id`` narrows it to one response."""
    scores = _counted_scores(study)
    if response_id is not None:
        scores = scores.filter(rating__response_id=response_id)
    pairs: dict[tuple[int, int], tuple[int | None, int]] = {
        (row["rating__response_id"], row["attribute_id"]): (row["spread"], row["n"])
        for row in _spreads(scores)
        .annotate(threshold=_threshold_expression(study))
        .filter(n__gte=2, spread__gte=F("threshold"))
    }
    flagged = set(
        _flagged_items(study, response_id).values_list("response_id", flat=True).distinct()
    )
    attributes = list(Attribute.objects.filter(rubric_id=study.rubric_id).order_by("position"))
    if flagged:
        known = {
            (row["rating__response_id"], row["attribute_id"]): (row["spread"], row["n"])
            for row in _spreads(scores.filter(rating__response_id__in=flagged))
        }
        for rid in flagged:
            for attribute in attributes:
                pairs.setdefault((rid, attribute.pk), known.get((rid, attribute.pk), (None, 0)))
    if not pairs:
        return []
    response_ids = {rid for rid, _ in pairs}
    conversations = dict(
        Response.objects.filter(pk__in=response_ids).values_list("pk", "conversation__external_id")
    )
    done = set(
        Adjudication.objects.filter(study=study, response_id__in=response_ids).values_list(
            "response_id", "attribute_id"
        )
    )
    by_id = {a.pk: a for a in attributes}
    rows = [
        QueueRow(
            response_id=rid,
            conversation=conversations[rid],
            attribute_id=aid,
            attribute=by_id[aid].name,
            spread=spread,
            n_clinicians=n,
            flagged=rid in flagged,
            adjudicated=(rid, aid) in done,
        )
        for (rid, aid), (spread, n) in pairs.items()
        if aid in by_id
    ]
    rows.sort(
        key=lambda r: (
            not r.flagged,
            -(r.spread if r.spread is not None else -1),
            r.conversation,
            r.response_id,
            by_id[r.attribute_id].position,
        )
    )
    return rows


def disputed_attribute_ids(*, study: Study, response_id: int) -> set[int]:
    """The attributes of one response that an adjudicator may settle (see adjudication_queue)."""
    return {row.attribute_id for row in adjudication_queue(study=study, response_id=response_id)}


# --- One response's page -------------------------------------------------------------------------


@dataclass
class ClinicianScore:
    label: str  # "Clinician A"
    value: int


@dataclass
class DisputedAttribute:
    attribute_id: int
    name: str
    description: str
    levels: list[tuple[int, str]]  # (value, anchor), highest first as on the rating page
    scores: list[ClinicianScore]
    spread: int | None
    final_score: int | None = None
    reason: str = ""
    reason_text: str = ""
    rubric_needs_change: bool = False


@dataclass
class AdjudicationPage:
    study_id: int
    study_name: str
    response_id: int
    conversation: str
    context: str
    text: str
    flag_reasons: list[str]
    rationales: list[tuple[str, str]]  # (label, rationale)
    attributes: list[DisputedAttribute] = field(default_factory=list)
    next_response_id: int | None = None
    remaining: int = 0


def _letter(n: int) -> str:
    return chr(ord("A") + n) if n < 26 else f"#{n + 1}"


def adjudication_page(*, study: Study, response_id: int) -> AdjudicationPage:
    """Everything the adjudicator sees of one response: the conversation, the response's text,
    and per disputed attribute the clinicians' scores (as Clinician A, B, …, the same letter for
    the same clinician throughout the page) and the current adjudication. 404 for a response
    that is not this study's real work."""
    response = (
        Response.objects.filter(pk=response_id, conversation__study=study)
        .exclude(conversation__practice=True)
        .values("pk", "text", "conversation__external_id", "conversation__context")
        .first()
    )
    if response is None:
        raise Http404("No such response in this study")
    queue = adjudication_queue(study=study)
    mine = [row for row in queue if row.response_id == response_id]
    ratings = list(
        _counted_ratings(study)
        .filter(response_id=response_id)
        .order_by("pk")
        .values_list("pk", "rationale")
    )
    letters = {pk: f"Clinician {_letter(n)}" for n, (pk, _) in enumerate(ratings)}
    scores: dict[int, list[ClinicianScore]] = defaultdict(list)
    for rating_id, attribute_id, value in (
        Score.objects.filter(rating_id__in=letters)
        .order_by("rating_id")
        .values_list("rating_id", "attribute_id", "value")
    ):
        scores[attribute_id].append(ClinicianScore(label=letters[rating_id], value=value))
    ids = [row.attribute_id for row in mine]
    attributes = {a.pk: a for a in Attribute.objects.filter(pk__in=ids)}
    levels: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for attribute_id, value, anchor in AttributeLevel.objects.filter(
        attribute_id__in=ids
    ).values_list("attribute_id", "value", "anchor"):
        levels[attribute_id].append((value, anchor))
    current = {
        a.attribute_id: a
        for a in Adjudication.objects.filter(response_id=response_id, attribute_id__in=ids)
    }
    disputed = []
    for row in mine:
        attribute = attributes[row.attribute_id]
        item = DisputedAttribute(
            attribute_id=attribute.pk,
            name=attribute.name,
            description=attribute.description,
            levels=sorted(levels[attribute.pk], reverse=True),
            scores=scores.get(attribute.pk, []),
            spread=row.spread,
        )
        made = current.get(attribute.pk)
        if made is not None:
            item.final_score = made.final_score
            item.reason = made.reason
            item.reason_text = made.reason_text
            item.rubric_needs_change = made.rubric_needs_change
        disputed.append(item)
    flag_reasons = [
        reason
        for reason in _flagged_items(study, response_id).values_list(
            "assignment__flag_reason", flat=True
        )
        if reason
    ]
    # The next response with something still to settle, in the queue's order after this one.
    order = list(dict.fromkeys(row.response_id for row in queue))
    open_ids = list(dict.fromkeys(row.response_id for row in queue if not row.adjudicated))
    after = order[order.index(response_id) + 1 :] if response_id in order else order
    following = next((rid for rid in after if rid in open_ids), None)
    if following is None:
        following = next((rid for rid in open_ids if rid != response_id), None)
    return AdjudicationPage(
        study_id=study.pk,
        study_name=study.name,
        response_id=response_id,
        conversation=response["conversation__external_id"],
        context=response["conversation__context"],
        text=response["text"],
        flag_reasons=flag_reasons,
        rationales=[(letters[pk], text) for pk, text in ratings if text.strip()],
        attributes=disputed,
        next_response_id=following,
        remaining=len(open_ids),
    )


# --- Final scores and their provenance -----------------------------------------------------------


@dataclass(frozen=True)
class FinalScore:
    conversation: str
    response_id: int
    responder: str
    attribute: str
    final_score: float | None  # None while awaiting adjudication
    provenance: str  # one of PROVENANCES
    reason: str
    rubric_needs_change: bool
    n_clinicians: int


def final_scores(*, study: Study) -> list[FinalScore]:
    """The final score of every (response, attribute) that clinicians scored or an adjudicator
    settled, with its provenance:

    - ``adjudicated``: an adjudicator's score (whatever the clinicians said);
    - ``single-clinician``: one clinician scored it: their score;
    - ``clinician-consensus``: two or more clinicians less than the attribute's threshold
      (attribute_thresholds) apart: their mean;
    - ``awaiting-adjudication``: two or more clinicians at the threshold or further apart and no
      adjudication yet: no final score.

    Three queries whatever the study's size; ordered by conversation, responder, attribute."""
    spreads = {
        (row["rating__response_id"], row["attribute_id"]): row
        for row in _spreads(_counted_scores(study)).annotate(threshold=_threshold_expression(study))
    }
    adjudicated = {
        (a.response_id, a.attribute_id): a
        for a in Adjudication.objects.filter(study=study).only(
            "response_id", "attribute_id", "final_score", "reason", "rubric_needs_change"
        )
    }
    keys = set(spreads) | set(adjudicated)
    if not keys:
        return []
    responses = {
        pk: (conversation, responder)
        for pk, conversation, responder in Response.objects.filter(
            pk__in={rid for rid, _ in keys}
        ).values_list("pk", "conversation__external_id", "responder__key")
    }
    attributes = {
        a.pk: a for a in Attribute.objects.filter(rubric_id=study.rubric_id).order_by("position")
    }
    rows = []
    for rid, aid in keys:
        if aid not in attributes or rid not in responses:
            continue
        spread = spreads.get((rid, aid))
        n = spread["n"] if spread else 0
        made = adjudicated.get((rid, aid))
        if made is not None:
            score: float | None = float(made.final_score)
            provenance, reason, change = ADJUDICATED, made.reason, made.rubric_needs_change
        else:
            assert spread is not None
            reason, change = "", False
            if n == 1:
                score, provenance = float(spread["lo"]), SINGLE
            elif spread["spread"] < spread["threshold"]:
                score, provenance = float(spread["mean"]), CONSENSUS
            else:
                score, provenance = None, AWAITING
        conversation, responder = responses[rid]
        rows.append(
            FinalScore(
                conversation=conversation,
                response_id=rid,
                responder=responder,
                attribute=attributes[aid].name,
                final_score=score,
                provenance=provenance,
                reason=reason,
                rubric_needs_change=change,
                n_clinicians=n,
            )
        )
    position = {a.name: a.position for a in attributes.values()}
    rows.sort(key=lambda r: (r.conversation, r.responder, position[r.attribute]))
    return rows


def clinician_labels(*, study: Study, response_ids: set[int]) -> dict[int, dict[int, str]]:
    """response → rater → "Clinician A", "Clinician B", …: the letters `adjudication_page`
    gives the clinicians whose ratings count, in the same order, for other pages of the same
    response (escalations) to name each clinician alike. One query."""
    labels: dict[int, dict[int, str]] = defaultdict(dict)
    for response_id, rater_id in (
        _counted_ratings(study)
        .filter(response_id__in=response_ids)
        .order_by("pk")
        .values_list("response_id", "rater_id")
    ):
        mine = labels[response_id]
        mine.setdefault(rater_id, f"Clinician {_letter(len(mine))}")
    return labels


# --- As a release holds them (docs/release.md) ---------------------------------------------------

#: final_scores.csv of a release: no database id, so that a re-imported study gives the same file.
RELEASE_FINAL_COLUMNS = (
    "conversation",
    "responder",
    "attribute",
    "final_score",
    "provenance",
    "reason",
    "rubric_needs_change",
    "n_clinicians",
)
#: adjudications.csv of a release; the adjudicator as a code of the release (A01, …), never named.
RELEASE_ADJUDICATION_COLUMNS = (
    "conversation",
    "responder",
    "attribute",
    "final_score",
    "reason",
    "reason_text",
    "rubric_needs_change",
    "adjudicator",
)


def score_text(*, score: float | None) -> str:
    """A final score as text: whole numbers without a decimal point, others as the shortest
    text that reads back as the same number, nothing while awaiting adjudication."""
    if score is None:
        return ""
    return str(int(score)) if float(score).is_integer() else repr(float(score))


def final_score_release_rows(*, study: Study) -> list[tuple[str, ...]]:
    """final_scores as the text rows of a release's final_scores.csv (RELEASE_FINAL_COLUMNS),
    in final_scores' order. The same function reads a re-imported study back for comparison."""
    return [
        (
            row.conversation,
            row.responder,
            row.attribute,
            score_text(score=row.final_score),
            row.provenance,
            row.reason,
            "true" if row.rubric_needs_change else "false",
            str(row.n_clinicians),
        )
        for row in final_scores(study=study)
    ]


def adjudication_release_rows(*, study: Study) -> list[tuple[str, ...]]:
    """The study's adjudications as the text rows of a release's adjudications.csv
    (RELEASE_ADJUDICATION_COLUMNS), by conversation, responder and attribute. Adjudicators are
    numbered A01, A02, … in the order of their first adjudication in the study; one whose
    account was deleted is left blank. No practice conversation (none can be adjudicated)."""
    rows = list(
        Adjudication.objects.filter(study=study, response__conversation__practice=False)
        .order_by("pk")
        .values_list(
            "response__conversation__external_id",
            "response__conversation_id",
            "response__responder__key",
            "attribute__name",
            "attribute__position",
            "final_score",
            "reason",
            "reason_text",
            "rubric_needs_change",
            "adjudicator_id",
        )
    )
    codes: dict[int, str] = {}
    for *_, adjudicator in rows:
        if adjudicator is not None and adjudicator not in codes:
            codes[adjudicator] = f"A{len(codes) + 1:02d}"
    rows.sort(key=lambda r: (r[1], r[2], r[4]))
    return [
        (
            row[0],
            row[2],
            row[3],
            str(row[5]),
            row[6],
            row[7],
            "true" if row[8] else "false",
            codes.get(row[9], "") if row[9] is not None else "",
        )
        for row in rows
    ]
