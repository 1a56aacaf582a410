"""Writes for the annotation app: studies, rubrics, imports (STYLE.md: services write)."""

import random
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from judging.label_parsing import OTHERS
from judging.parsing import parse_judge_output
from judging.prompts import DEFAULT_DISTORTIONS, NO_DISTORTION

from .importers.base import ImportProblem
from .importers.limits import ImportLimits
from .importers.mentalalign import Workbook
from .importers.mentalbench import ConversationRecord
from .models import (
    Assignment,
    AssignmentItem,
    Attribute,
    AttributeLevel,
    Conversation,
    DistortionLabel,
    ImportLog,
    LabelAnnotation,
    LabelChange,
    Rater,
    Rating,
    RatingChange,
    Responder,
    Response,
    Rubric,
    Score,
    Study,
)
from .responders import KNOWN_RESPONDERS, paper_judge_defaults
from .rubric import DEFAULT_ATTRIBUTES, DEFAULT_RUBRIC_NAME

BATCH = 5000


@transaction.atomic
def rubric_get_or_create_default() -> Rubric:
    rubric, created = Rubric.objects.get_or_create(name=DEFAULT_RUBRIC_NAME)
    if created:
        for position, spec in enumerate(DEFAULT_ATTRIBUTES):
            attribute = Attribute.objects.create(
                rubric=rubric,
                name=spec["name"],
                group=spec["group"],
                description=spec["description"],
                position=position,
            )
            AttributeLevel.objects.bulk_create(
                AttributeLevel(attribute=attribute, value=value, anchor=anchor)
                for value, anchor in spec["anchors"].items()
            )
    return rubric


@transaction.atomic
def study_get_or_create(
    *,
    name: str,
    description: str = "",
    kind: str = Study.Kind.RESPONSE_RATING,
    label_scheme: str = Study.LabelScheme.RANKED,
) -> tuple[Study, bool]:
    """The study of that name, or a new one. A new distortion study gets the paper's label set
    (Table 1 + "No Distortion"); `kind` and `label_scheme` only apply to a new study."""
    name = name.strip()
    if not name:
        raise ValueError("a study needs a name")
    _check_name_length(name, what="study", field=Study._meta.get_field("name"))
    study = Study.objects.filter(name=name).first()
    if study:
        return study, False
    if kind not in Study.Kind.values:
        raise ValueError(f"unknown study kind {kind!r}")
    if label_scheme not in Study.LabelScheme.values:
        raise ValueError(f"unknown label scheme {label_scheme!r}")
    # Every study has a rubric (the column is required); distortion studies simply do not use it.
    rubric = rubric_get_or_create_default()
    study = Study.objects.create(
        name=name, rubric=rubric, description=description, kind=kind, label_scheme=label_scheme
    )
    if kind == Study.Kind.DISTORTION_LABELLING:
        distortion_labels_set(study=study, labels=DEFAULT_DISTORTIONS)
    return study, True


@transaction.atomic
def distortion_labels_set(*, study: Study, labels: list[dict[str, str]]) -> list[DistortionLabel]:
    """Replace a distortion study's label set; refused once anything has been labelled, since
    stored labels name entries of the set."""
    if study.kind != Study.Kind.DISTORTION_LABELLING:
        raise ValueError("only distortion studies have a label set")
    if LabelAnnotation.objects.filter(conversation__study=study).exists():
        raise ValueError("this study has labels already; its label set can no longer change")
    names = [label["name"].strip() for label in labels]
    if not names or any(not n for n in names) or len(set(names)) != len(names):
        raise ValueError("a label set needs distinct, non-empty names")
    if OTHERS in names:
        raise ValueError(f"{OTHERS!r} is reserved for out-of-list labels")
    DistortionLabel.objects.filter(study=study).delete()
    return DistortionLabel.objects.bulk_create(
        DistortionLabel(
            study=study,
            name=name,
            prompt_label=label.get("prompt_label", "") if label.get("prompt_label") != name else "",
            definition=label.get("description", "") or label.get("definition", ""),
            example=label.get("example", ""),
            position=position,
        )
        for position, (name, label) in enumerate(zip(names, labels, strict=True))
    )


def responders_ensure(*, keys: set[str]) -> dict[str, Responder]:
    existing = {r.key: r for r in Responder.objects.filter(key__in=keys)}
    missing = []
    for key in sorted(keys - set(existing)):
        known = KNOWN_RESPONDERS.get(key, {})
        missing.append(
            Responder(
                key=key,
                name=known.get("name", key),
                family=known.get("family", key),
                is_reference=known.get("is_reference", False),
            )
        )
    for responder in Responder.objects.bulk_create(missing):
        existing[responder.key] = responder
    return existing


def _check_name_length(name: str, *, what: str, field) -> None:
    # A name longer than its column would fail inside the database write with no hint of which.
    if len(name) > field.max_length:
        raise ValueError(
            f"the {what} name is {len(name):,} characters, more than the {field.max_length} allowed"
        )


def responders_check_study_limit(*, study: Study, keys: set[str], file: str) -> None:
    """Refuse an import that would give a study more responders than IMPORT_MAX_RESPONDERS_PER_STUDY
    (every responder is a column in the admin, the exports and the dashboards)."""
    limit = ImportLimits.from_settings().max_responders_per_study
    if len(keys) <= limit:
        present = set(
            Response.objects.filter(conversation__study=study)
            .values_list("responder__key", flat=True)
            .distinct()
        )
        total = len(present | keys)
    else:
        total = len(keys)  # already too many: no need to ask the database
    if total > limit:
        raise ImportProblem(
            f"this import would give study {study.name!r} {total:,} responders, more than the "
            f"limit of {limit:,} (IMPORT_MAX_RESPONDERS_PER_STUDY)",
            file=file,
            row=1,
        )


def judge_rater_get_or_create(*, name: str, excluded: list[str] | None = None) -> Rater:
    """A judge rater; without `excluded`, the paper's self-exclusion for a known judge name."""
    _check_name_length(name, what="judge", field=Rater._meta.get_field("name"))
    defaults = paper_judge_defaults(name)
    rater, created = Rater.objects.get_or_create(
        name=name,
        defaults={
            "kind": Rater.Kind.JUDGE,
            "model": name,
            "family": defaults.get("family", ""),
            "excluded_responders": defaults.get("excluded", []) if excluded is None else excluded,
        },
    )
    if rater.kind != Rater.Kind.JUDGE:
        raise ValueError(f"rater {name!r} exists and is a {rater.kind}, not a judge")
    if not created and excluded is not None and rater.excluded_responders != excluded:
        rater.excluded_responders = excluded
        rater.save(update_fields=["excluded_responders"])
    return rater


def clinician_rater_get_or_create(*, name: str) -> Rater:
    _check_name_length(name, what="rater", field=Rater._meta.get_field("name"))
    rater, _ = Rater.objects.get_or_create(name=name, defaults={"kind": Rater.Kind.CLINICIAN})
    if rater.kind != Rater.Kind.CLINICIAN:
        raise ValueError(f"rater {name!r} exists and is a {rater.kind}, not a clinician")
    return rater


@transaction.atomic
def conversations_import(
    *,
    study: Study,
    records: list[ConversationRecord],
    file_name: str,
    sha256: str,
    user: AbstractBaseUser | None = None,
) -> dict:
    """Store conversations and responses; re-importing the same file creates nothing.

    Refuses (ImportProblem, nothing written) to change the text of a stored conversation or
    response, since clinicians may already have rated it. A blank stored response text (from a
    ratings-only release) is filled in.
    """
    keys = {k for r in records for k in r.responses}
    responders_check_study_limit(study=study, keys=keys, file=file_name)
    responders = responders_ensure(keys=keys)
    stored = {
        ext: (pk, context)
        for ext, pk, context in Conversation.objects.filter(study=study).values_list(
            "external_id", "id", "context"
        )
    }
    new_conversations = []
    for record in records:
        if record.external_id in stored:
            if stored[record.external_id][1] != record.context:
                raise ImportProblem(
                    f"conversation {record.external_id!r} is already in study {study.name!r} "
                    "with a different context; refusing to change text that may have been rated",
                    file=file_name,
                    row=record.row,
                    column="context",
                )
        else:
            new_conversations.append(
                Conversation(
                    study=study,
                    external_id=record.external_id,
                    context=record.context,
                    conditions=record.conditions,
                    source=record.source,
                )
            )
    for conversation in Conversation.objects.bulk_create(new_conversations, batch_size=BATCH):
        stored[conversation.external_id] = (conversation.pk, conversation.context)

    stored_responses = {
        (conv, resp): (pk, text)
        for pk, conv, resp, text in Response.objects.filter(conversation__study=study).values_list(
            "id", "conversation_id", "responder_id", "text"
        )
    }
    new_responses, filled = [], []
    for record in records:
        conversation_id = stored[record.external_id][0]
        for key, text in record.responses.items():
            responder = responders[key]
            found = stored_responses.get((conversation_id, responder.pk))
            if found is None:
                new_responses.append(
                    Response(conversation_id=conversation_id, responder=responder, text=text)
                )
            elif found[1] == "":
                filled.append(Response(pk=found[0], text=text))
            elif found[1] != text:
                raise ImportProblem(
                    f"the {key!r} response of conversation {record.external_id!r} is already "
                    "stored with a different text; refusing to change text that may have been "
                    "rated",
                    file=file_name,
                    row=record.row,
                    column="response" if key == "original" else key,
                )
    Response.objects.bulk_create(new_responses, batch_size=BATCH)
    Response.objects.bulk_update(filled, ["text"], batch_size=BATCH)
    summary = {
        "rows": len(records),
        "conversations_created": len(new_conversations),
        "conversations_already_present": len(records) - len(new_conversations),
        "responses_created": len(new_responses),
        "responses_text_filled": len(filled),
        "responders": sorted(responders),
    }
    ImportLog.objects.create(
        study=study,
        kind="conversations",
        file_name=file_name,
        sha256=sha256,
        summary=summary,
        created_by=user,
    )
    return summary


@dataclass
class WorkbookSource:
    workbook: Workbook
    rater: Rater
    sha256: str


def _conversations_for_workbook(
    study: Study, workbook: Workbook, *, strict: bool
) -> tuple[dict[str, int], list[dict]]:
    """Conversation ids by ConvID, creating missing ones. Ratings are paired by ConvID (as the
    paper does); a context that differs from the stored one is reported, not silently accepted:
    the released human workbook has 19 such rows (its contexts are shifted by one row there).
    """
    stored = {
        ext: (pk, context)
        for ext, pk, context in Conversation.objects.filter(
            study=study, external_id__in=list(workbook.contexts)
        ).values_list("external_id", "id", "context")
    }
    new, problems = [], []
    for ext, (row, context) in workbook.contexts.items():
        if ext not in stored:
            new.append(
                Conversation(
                    study=study, external_id=ext, context=context, source="MentalAlign-70k"
                )
            )
        elif stored[ext][1] != context:
            reason = (
                f"context differs from the one stored for conversation {ext}; kept the stored "
                "context, ratings paired by ConvID"
            )
            if strict:
                raise ImportProblem(reason, file=workbook.file, row=row, column="context")
            problems.append(
                {
                    "file": workbook.file,
                    "row": row,
                    "column": "context",
                    "conversation": ext,
                    "responder": "",
                    "reason": reason,
                }
            )
    for conversation in Conversation.objects.bulk_create(new, batch_size=BATCH):
        stored[conversation.external_id] = (conversation.pk, conversation.context)
    return {ext: pk for ext, (pk, _) in stored.items()}, problems


def _responses_for_workbook(
    study: Study, workbook: Workbook, conversations: dict[str, int]
) -> dict:
    responders_check_study_limit(study=study, keys=set(workbook.responders), file=workbook.file)
    responders = responders_ensure(keys=set(workbook.responders))
    stored = {
        (conv, resp): pk
        for pk, conv, resp in Response.objects.filter(
            conversation_id__in=list(conversations.values())
        ).values_list("id", "conversation_id", "responder_id")
    }
    new = [
        Response(
            conversation_id=conversations[cell.conversation],
            responder=responders[cell.responder],
            text="",
        )
        for cell in workbook.cells
        if (conversations[cell.conversation], responders[cell.responder].pk) not in stored
    ]
    for response in Response.objects.bulk_create(new, batch_size=BATCH):
        stored[(response.conversation_id, response.responder_id)] = response.pk
    return {
        (ext, key): stored[(conv_pk, responders[key].pk)]
        for ext, conv_pk in conversations.items()
        for key in workbook.responders
    }


@transaction.atomic
def mentalalign_import(
    *,
    study: Study,
    sources: list[WorkbookSource],
    strict: bool = False,
    user: AbstractBaseUser | None = None,
) -> list[dict]:
    """Store every parseable cell as a complete rating (with its raw text) and every unparseable
    one as an invalid rating (raw text and reason, no scores); count empty cells. All sources
    are one transaction. With `strict`, the first unusable cell aborts the whole import.
    Re-importing stores nothing twice (existing rater/response ratings are kept).
    """
    rubric = study.rubric
    attributes = list(rubric.attributes.all())
    names = [a.name for a in attributes]
    scale = (rubric.scale_min, rubric.scale_max)
    summaries = []
    for source in sources:
        workbook, rater = source.workbook, source.rater
        conversations, problems = _conversations_for_workbook(study, workbook, strict=strict)
        responses = _responses_for_workbook(study, workbook, conversations)
        existing = dict(
            Rating.objects.filter(
                rater=rater, run__isnull=True, repeat=0, response_id__in=list(responses.values())
            ).values_list("response_id", "raw_output")
        )
        ratings: list[Rating] = []
        parsed_scores: list[dict[str, int]] = []
        counts: Counter = Counter()
        for cell in workbook.cells:
            response_id = responses[(cell.conversation, cell.responder)]
            raw = cell.raw if cell.raw is not None else ""
            if response_id in existing:
                counts["already_present"] += 1
                if existing[response_id] != raw:
                    counts["changed_since_import"] += 1
                    problems.append(
                        _problem(
                            workbook, cell, "differs from the stored import; kept the stored rating"
                        )
                    )
                continue
            if not raw.strip():
                counts["empty"] += 1
                problems.append(_problem(workbook, cell, "empty cell"))
                if strict:
                    raise ImportProblem(
                        "empty cell", file=workbook.file, row=cell.row, column=cell.column
                    )
                continue
            parsed = parse_judge_output(raw, names, scale)
            if not parsed.ok:
                if strict:
                    raise ImportProblem(
                        parsed.error, file=workbook.file, row=cell.row, column=cell.column
                    )
                counts["invalid"] += 1
                problems.append(_problem(workbook, cell, parsed.error))
            else:
                counts["stored"] += 1
            ratings.append(
                Rating(
                    rater=rater,
                    response_id=response_id,
                    run=None,
                    repeat=0,
                    status=Rating.Status.COMPLETE if parsed.ok else Rating.Status.INVALID,
                    source=Rating.Source.IMPORT,
                    rationale=parsed.explanation,
                    overall=parsed.overall,
                    raw_output=raw,
                    error=parsed.error or "",
                )
            )
            parsed_scores.append(parsed.scores)
        Rating.objects.bulk_create(ratings, batch_size=BATCH)
        by_name = {a.name: a for a in attributes}
        Score.objects.bulk_create(
            (
                Score(rating=rating, attribute=by_name[name], value=value)
                for rating, scores in zip(ratings, parsed_scores, strict=True)
                for name, value in scores.items()
            ),
            batch_size=BATCH,
        )
        summary = {
            "file": workbook.file,
            "rater": rater.name,
            "cells": len(workbook.cells),
            "stored": counts["stored"],
            "invalid": counts["invalid"],
            "empty": counts["empty"],
            "already_present": counts["already_present"],
            "changed_since_import": counts["changed_since_import"],
            "conversations": len(conversations),
            "context_mismatches": sum(p["column"] == "context" for p in problems),
        }
        log = ImportLog.objects.create(
            study=study,
            kind="mentalalign",
            file_name=workbook.file,
            sha256=source.sha256,
            summary=summary,
            problems=problems,
            created_by=user,
        )
        summaries.append({**summary, "problems": problems, "log_id": log.pk})
    return summaries


def _problem(workbook: Workbook, cell, reason: str) -> dict:
    return {
        "file": workbook.file,
        "row": cell.row,
        "column": cell.column.strip(),
        "conversation": cell.conversation,
        "responder": cell.responder,
        "reason": reason,
    }


# --- Clinician rating: assignments, autosave, submit, flag (issue 3) -----------------------------

# A heartbeat adds at most this many seconds: the page sends one every 15 s while it is visible
# and was used in the last minute, so a longer gap means the clinician was away.
HEARTBEAT_MAX_SECONDS = 20
# Edit clocks come from the browser; one far in the future would lock every later edit out.
CLOCK_SKEW_MS = 60_000

OPEN = (Assignment.Status.PENDING, Assignment.Status.IN_PROGRESS)


class AssignmentLocked(Exception):
    """The assignment was submitted, flagged or reclaimed: it takes no more edits."""


class AssignmentIncomplete(Exception):
    def __init__(self, missing: list[tuple[str, list[str]]]):
        self.missing = missing  # [("A", ["Safety", "Empathy"]), …] in display order
        super().__init__(
            "; ".join(f"Response {label}: {', '.join(names)} missing" for label, names in missing)
        )


@dataclass
class SaveResult:
    saved: bool  # False: a newer edit (another tab) was already stored and is kept
    value: int | str | None  # what is stored now


def _items_for(
    assignment: Assignment, responses: list[Response], seed: int
) -> list[AssignmentItem]:
    # The order is a function of the recorded seed alone (responses sorted by pk first), so the
    # export can re-derive and check it; it is also stored, so a reload never re-draws it.
    ordered = sorted(responses, key=lambda r: r.pk)
    random.Random(seed).shuffle(ordered)
    return [
        AssignmentItem(assignment=assignment, response=response, position=position)
        for position, response in enumerate(ordered)
    ]


@transaction.atomic
def assignments_create(
    *,
    study: Study,
    clinicians: list[Rater],
    overlap: int = 1,
    overlap_fraction: float = 0.0,
    seed_rng: random.Random | None = None,
) -> list[Assignment]:
    """Give every conversation of the study to one clinician, and `overlap_fraction` of them
    (1.0 = all) to `overlap` clinicians in all, for inter-rater agreement.

    Balanced: each copy goes to the clinician with the fewest assignments in the study so far
    (ties broken by name). Conversations already assigned count towards their overlap, so running
    it again, or after importing more conversations, only adds what is missing. Conversations
    without response texts (MentalAlign import) are skipped; a distortion study assigns every
    conversation (clinicians label its user message). `seed_rng` makes the permutation
    seeds reproducible (tests); otherwise each assignment gets a fresh random seed.
    """
    if not clinicians:
        raise ValueError("choose at least one clinician")
    if any(c.kind != Rater.Kind.CLINICIAN for c in clinicians):
        raise ValueError("only clinicians can be assigned conversations")
    if not 1 <= overlap <= len(clinicians):
        raise ValueError(
            f"overlap must be between 1 and the number of clinicians ({len(clinicians)})"
        )
    if not 0.0 <= overlap_fraction <= 1.0:
        raise ValueError("the overlap fraction must be between 0 and 1")

    # Two admins assigning the same study at once would both see the same load: one waits.
    Study.objects.select_for_update().filter(pk=study.pk).first()
    responses: dict[int, list[Response]] = {}
    if study.kind == Study.Kind.DISTORTION_LABELLING:
        # Clinicians label the user's message itself: every conversation, no responses shown.
        for conversation_id in Conversation.objects.filter(study=study).values_list(
            "id", flat=True
        ):
            responses[conversation_id] = []
    else:
        for response in Response.objects.filter(conversation__study=study).exclude(text=""):
            responses.setdefault(response.conversation_id, []).append(response)
    conversation_ids = sorted(responses)
    live = Assignment.objects.filter(conversation__study=study).exclude(
        status=Assignment.Status.RECLAIMED
    )
    holders: dict[int, set[int]] = {c: set() for c in conversation_ids}
    for conversation_id, rater_id in live.values_list("conversation_id", "rater_id"):
        holders.setdefault(conversation_id, set()).add(rater_id)
    ever = set(
        Assignment.objects.filter(conversation__study=study).values_list(
            "conversation_id", "rater_id"
        )
    )
    load = Counter(rater_id for ids in holders.values() for rater_id in ids)

    # Conversations that already have several raters count towards the overlapped fraction;
    # the rest are drawn at random, so the overlap is not "the first conversations".
    rng = seed_rng or random.Random()
    overlapped: set[int] = set()
    if overlap > 1:
        wanted = round(overlap_fraction * len(conversation_ids))
        shared = [c for c in conversation_ids if len(holders[c]) > 1]
        single = [c for c in conversation_ids if len(holders[c]) <= 1]
        overlapped = set(shared[:wanted])
        overlapped |= set(rng.sample(single, max(0, min(len(single), wanted - len(overlapped)))))

    new: list[Assignment] = []
    for conversation_id in conversation_ids:
        wanted = overlap if conversation_id in overlapped else 1
        have = holders.setdefault(conversation_id, set())
        while len(have) < wanted:
            candidates = [
                c for c in clinicians if c.pk not in have and (conversation_id, c.pk) not in ever
            ]
            if not candidates:
                break
            chosen = min(candidates, key=lambda c: (load[c.pk], c.name))
            have.add(chosen.pk)
            load[chosen.pk] += 1
            assignment = Assignment(rater=chosen, conversation_id=conversation_id)
            if seed_rng is not None:
                assignment.seed = seed_rng.getrandbits(63)
            new.append(assignment)
    Assignment.objects.bulk_create(new, batch_size=BATCH)
    items = [
        item
        for assignment in new
        for item in _items_for(assignment, responses[assignment.conversation_id], assignment.seed)
    ]
    AssignmentItem.objects.bulk_create(items, batch_size=BATCH)
    return new


def _items_copy(*, source: Assignment, target: Assignment) -> None:
    responses = [item.response for item in source.items.select_related("response")]
    AssignmentItem.objects.bulk_create(_items_for(target, responses, target.seed))


@transaction.atomic
def assignment_reassign(*, assignment: Assignment, rater: Rater) -> Assignment:
    """Move work nobody has started to another clinician. Started work is never moved silently:
    it raises ValueError (use `assignment_reclaim` once it is stale)."""
    assignment = Assignment.objects.select_for_update().get(pk=assignment.pk)
    if assignment.status != Assignment.Status.PENDING or (
        assignment.ratings.exists() or assignment.label_annotations.exists()
    ):
        raise ValueError("this assignment was started; reclaim it instead once it is stale")
    if rater.kind != Rater.Kind.CLINICIAN:
        raise ValueError("only clinicians can be assigned conversations")
    if Assignment.objects.filter(rater=rater, conversation=assignment.conversation_id).exists():
        raise ValueError(f"{rater} already has this conversation")
    assignment.rater = rater
    assignment.save(update_fields=["rater"])
    return assignment


def assignment_is_stale(assignment: Assignment, *, now=None) -> bool:
    now = now or timezone.now()
    touched = assignment.last_activity_at or assignment.created_at
    limit = timedelta(days=assignment.conversation.study.stale_after_days)
    return assignment.status in OPEN and now - touched > limit


@transaction.atomic
def assignment_reclaim(*, assignment: Assignment, rater: Rater) -> Assignment:
    """Hand a stale assignment to another clinician. The first clinician's partial ratings stay
    (as drafts on the old, now reclaimed assignment); the new one gets a fresh order."""
    assignment = (
        Assignment.objects.select_for_update()
        .select_related("conversation__study")
        .get(pk=assignment.pk)
    )
    if not assignment_is_stale(assignment):
        days = assignment.conversation.study.stale_after_days
        raise ValueError(f"only work untouched for more than {days} days can be reclaimed")
    if rater.pk == assignment.rater_id or rater.kind != Rater.Kind.CLINICIAN:
        raise ValueError("choose another clinician")
    if Assignment.objects.filter(rater=rater, conversation=assignment.conversation_id).exists():
        raise ValueError(f"{rater} already has this conversation")
    assignment.status = Assignment.Status.RECLAIMED
    assignment.save(update_fields=["status"])
    new = Assignment.objects.create(
        rater=rater, conversation=assignment.conversation, reclaimed_from=assignment
    )
    _items_copy(source=assignment, target=new)
    return new


def _locked_open(assignment: Assignment) -> Assignment:
    """Lock the assignment row: every write to one assignment runs one at a time (two tabs)."""
    # The study comes in the same query (it is not locked: of=self) for the rubric checks below.
    locked = (
        Assignment.objects.select_for_update(of=("self",))
        .select_related("conversation__study")
        .get(pk=assignment.pk)
    )
    if locked.status not in OPEN:
        raise AssignmentLocked(f"this conversation is {locked.get_status_display().lower()}")
    return locked


def _touch(assignment: Assignment, now) -> None:
    """Record activity. Active time grows by the gap since the previous activity (a save or a
    heartbeat), capped, so time away from the page is not counted."""
    fields = ["last_activity_at", "active_seconds"]
    previous = assignment.last_activity_at
    gap = (now - previous).total_seconds() if previous else None
    if gap is not None and 0 <= gap <= HEARTBEAT_MAX_SECONDS:
        # Whole seconds only; the remainder is carried (the clock advances by what was counted),
        # so frequent saves a fraction of a second apart still add up.
        assignment.active_seconds += int(gap)
        assignment.last_activity_at = previous + timedelta(seconds=int(gap))
    else:
        assignment.active_seconds += HEARTBEAT_MAX_SECONDS if gap else 0
        assignment.last_activity_at = now
    if assignment.status == Assignment.Status.PENDING:
        assignment.status = Assignment.Status.IN_PROGRESS
        assignment.started_at = now
        fields += ["status", "started_at"]
    assignment.save(update_fields=fields)


def _clock(edited_ms: int | None, now) -> int:
    server_ms = int(now.timestamp() * 1000)
    return server_ms if edited_ms is None else min(edited_ms, server_ms + CLOCK_SKEW_MS)


@transaction.atomic
def rating_save(
    *,
    assignment: Assignment,
    item_token: str,
    user: AbstractBaseUser,
    attribute_id: int | None = None,
    score: int | None = None,
    rationale: str | None = None,
    edited_ms: int | None = None,
) -> SaveResult:
    """Autosave one field: a score (attribute_id + score) or the rationale.

    Last edit wins per field, by the browser's edit clock `edited_ms`: a save older than what is
    stored (a stale tab, a retried request) changes nothing and reports the stored value. Every
    change is audited in RatingChange. Safe to retry: the same save twice stores one value once.
    """
    now = timezone.now()
    clock = _clock(edited_ms, now)
    assignment = _locked_open(assignment)
    response_id = (
        AssignmentItem.objects.filter(assignment=assignment, token=item_token)
        .order_by()  # the model's default ordering would join the assignment table
        .values_list("response_id", flat=True)
        .first()
    )
    if response_id is None:
        raise ValueError("unknown response")
    rating, _ = Rating.objects.get_or_create(
        rater_id=assignment.rater_id,
        response_id=response_id,
        run=None,
        repeat=0,
        defaults={
            "assignment": assignment,
            "status": Rating.Status.DRAFT,
            "source": Rating.Source.FORM,
        },
    )
    _touch(assignment, now)
    if attribute_id is not None:
        # One query checks both that the attribute is in this study's rubric and the score is on
        # its scale; the error path may take a second one to say which.
        rubric_id = assignment.conversation.study.rubric_id
        on_scale = AttributeLevel.objects.filter(
            attribute_id=attribute_id, value=score, attribute__rubric_id=rubric_id
        ).exists()
        if not on_scale:
            attribute = Attribute.objects.filter(pk=attribute_id, rubric_id=rubric_id).first()
            if attribute is None:
                raise ValueError("unknown attribute")
            raise ValueError(f"{attribute.name} takes a score from its scale, not {score!r}")
        current = Score.objects.filter(rating=rating, attribute_id=attribute_id).first()
        if current and current.edited_ms is not None and current.edited_ms > clock:
            return SaveResult(saved=False, value=current.value)
        if current is None:
            Score.objects.create(
                rating=rating, attribute_id=attribute_id, value=score, edited_ms=clock
            )
            old = ""
        else:
            old = str(current.value)
            current.value, current.edited_ms = score, clock
            current.save(update_fields=["value", "edited_ms"])
        if old != str(score):
            RatingChange.objects.create(
                rating=rating,
                attribute_id=attribute_id,
                field="score",
                old_value=old,
                new_value=str(score),
                changed_by=user,
            )
        return SaveResult(saved=True, value=score)
    if rationale is None:
        raise ValueError("nothing to save")
    if rating.rationale_edited_ms is not None and rating.rationale_edited_ms > clock:
        return SaveResult(saved=False, value=rating.rationale)
    rationale = rationale.strip()[:2000]
    old = rating.rationale
    rating.rationale, rating.rationale_edited_ms = rationale, clock
    rating.save(update_fields=["rationale", "rationale_edited_ms", "updated_at"])
    if old != rationale:
        RatingChange.objects.create(
            rating=rating, field="rationale", old_value=old, new_value=rationale, changed_by=user
        )
    return SaveResult(saved=True, value=rationale)


def _rationale_too_short(text: str, *, minimum: int) -> bool:
    return len(text.strip()) < max(minimum, 1)


def _rationale_rule(*, minimum: int) -> str:
    return f"rationale (at least {minimum} characters)" if minimum > 1 else "rationale"


@transaction.atomic
def assignment_submit(*, assignment: Assignment, user: AbstractBaseUser) -> Assignment:
    """Lock a conversation once every response has every attribute scored; its ratings become
    `complete` (the only ones analysis uses). Raises AssignmentIncomplete naming what is missing."""
    assignment = _locked_open(assignment)
    attributes = list(
        Attribute.objects.filter(rubric__studies__conversations=assignment.conversation_id)
    )
    items = list(assignment.items.order_by("position"))
    ratings = {
        r.response_id: r
        for r in Rating.objects.filter(
            rater_id=assignment.rater_id,
            response_id__in=[i.response_id for i in items],
            run=None,
            repeat=0,
        )
    }
    scored = set(
        Score.objects.filter(rating__in=ratings.values()).values_list(
            "rating__response_id", "attribute_id"
        )
    )
    study = assignment.conversation.study
    missing = []
    for item in items:
        names = [a.name for a in attributes if (item.response_id, a.pk) not in scored]
        rating = ratings.get(item.response_id)
        if study.rationale_required and _rationale_too_short(
            rating.rationale if rating else "", minimum=study.rationale_min_length
        ):
            names.append(_rationale_rule(minimum=study.rationale_min_length))
        if names:
            missing.append((item.label, names))
    if missing:
        raise AssignmentIncomplete(missing)
    now = timezone.now()
    Rating.objects.filter(pk__in=[r.pk for r in ratings.values()]).update(
        status=Rating.Status.COMPLETE, assignment=assignment, updated_at=now
    )
    RatingChange.objects.bulk_create(
        RatingChange(
            rating=r, field="status", old_value=r.status, new_value="complete", changed_by=user
        )
        for r in ratings.values()
    )
    assignment.status = Assignment.Status.SUBMITTED
    assignment.submitted_at = assignment.last_activity_at = now
    assignment.save(update_fields=["status", "submitted_at", "last_activity_at"])
    return assignment


@transaction.atomic
def assignment_flag(*, assignment: Assignment, reason: str) -> Assignment:
    """Set a conversation aside instead of rating it (distressing or broken content). Ratings
    already typed stay as drafts, which analysis ignores."""
    reason = reason.strip()
    if not reason:
        raise ValueError("say why you flag this conversation")
    assignment = _locked_open(assignment)
    assignment.status = Assignment.Status.FLAGGED
    assignment.flag_reason = reason[:2000]
    assignment.last_activity_at = timezone.now()
    assignment.save(update_fields=["status", "flag_reason", "last_activity_at"])
    return assignment


def assignment_heartbeat(*, assignment: Assignment) -> None:
    """Count active time: the page calls this every 15 s, only while it is visible and was used
    in the last minute; see `_touch`."""
    now = timezone.now()
    with transaction.atomic():
        try:
            assignment = _locked_open(assignment)
        except AssignmentLocked:
            return
        _touch(assignment, now)


@transaction.atomic
def clinician_create(*, username: str, email: str = "") -> tuple:
    """An admin-created clinician account without a usable password (the invite link sets it),
    with its role and its Rater."""
    from django.contrib.auth import get_user_model

    from .roles import CLINICIAN, role_add

    username = username.strip()
    User = get_user_model()
    if not username:
        raise ValueError("a clinician needs a username")
    if User.objects.filter(username=username).exists():
        raise ValueError(f"the username {username!r} is taken")
    if Rater.objects.filter(name=username).exists():
        raise ValueError(f"a rater named {username!r} exists already")
    user = User(username=username, email=email.strip())
    user.set_unusable_password()
    user.save()
    role_add(user=user, role=CLINICIAN)
    rater = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name=username, user=user)
    return user, rater


def user_password_token_issue(
    *, actor: AbstractBaseUser, user: AbstractBaseUser
) -> tuple[str, str]:
    """The (uidb64, token) pair of a one-time set-password link for `user`, issued by `actor`.

    Whoever holds the link can take the account over, so it is issued only for accounts the
    actor may manage (`roles.manageable_users`): an admin-group member never gets one for staff,
    a superuser or another admin. Issuing changes nothing yet; the token stops working once the
    password is set (Django's password-reset token generator).
    """
    from django.contrib.auth.tokens import default_token_generator
    from django.core.exceptions import PermissionDenied
    from django.utils.encoding import force_bytes
    from django.utils.http import urlsafe_base64_encode

    from .roles import user_can_manage

    if not user_can_manage(actor=actor, target=user):
        raise PermissionDenied(
            f"you may not issue a password link for {user.get_username()!r}: admin pages act only "
            "on accounts with fewer rights than your own"
        )
    return urlsafe_base64_encode(force_bytes(user.pk)), default_token_generator.make_token(user)


# --- Clinician distortion labelling (issue 6) ----------------------------------------------------


def study_label_names(*, study_id: int) -> list[str]:
    return list(
        DistortionLabel.objects.filter(study_id=study_id)
        .order_by("position")
        .values_list("name", flat=True)
    )


def labels_check(*, labels: list[str], names: list[str], scheme: str) -> list[str]:
    """A clinician's selection in canonical order, or ValueError saying what is wrong.

    Ranked: [dominant] or [dominant, secondary] (distinct). Multi: any number, in the label
    set's order. Either way "No Distortion" stands alone: it says there is no distortion.
    """
    unknown = [label for label in labels if label not in names]
    if unknown:
        raise ValueError(f"not a label of this study: {', '.join(unknown)}")
    if len(set(labels)) != len(labels):
        raise ValueError("the secondary label must differ from the dominant one")
    if NO_DISTORTION in labels and len(labels) > 1:
        raise ValueError(f"“{NO_DISTORTION}” cannot be combined with a distortion")
    if scheme == Study.LabelScheme.RANKED:
        if len(labels) > 2:
            raise ValueError("choose one dominant label and at most one secondary label")
        return labels
    return sorted(labels, key=names.index)


@transaction.atomic
def label_annotation_save(
    *,
    assignment: Assignment,
    user: AbstractBaseUser,
    labels: list[str],
    edited_ms: int | None = None,
) -> SaveResult:
    """Autosave a clinician's whole selection for the assignment's user message.

    Last edit wins by the browser's edit clock, as for ratings: an older save (a stale tab)
    changes nothing and reports the stored selection. Audited in LabelChange. Safe to retry.
    """
    now = timezone.now()
    clock = _clock(edited_ms, now)
    assignment = _locked_open(assignment)
    study = assignment.conversation.study
    if study.kind != Study.Kind.DISTORTION_LABELLING:
        raise ValueError("this conversation belongs to a response-rating study")
    labels = labels_check(
        labels=labels, names=study_label_names(study_id=study.pk), scheme=study.label_scheme
    )
    annotation, _ = LabelAnnotation.objects.get_or_create(
        rater_id=assignment.rater_id,
        conversation_id=assignment.conversation_id,
        run=None,
        repeat=0,
        defaults={
            "assignment": assignment,
            "status": LabelAnnotation.Status.DRAFT,
            "source": LabelAnnotation.Source.FORM,
        },
    )
    _touch(assignment, now)
    if annotation.edited_ms is not None and annotation.edited_ms > clock:
        return SaveResult(saved=False, value=", ".join(annotation.labels))
    old = list(annotation.labels)
    annotation.labels, annotation.edited_ms = labels, clock
    annotation.save(update_fields=["labels", "edited_ms", "updated_at"])
    if old != labels:
        LabelChange.objects.create(
            annotation=annotation,
            field="labels",
            old_value=", ".join(old),
            new_value=", ".join(labels),
            changed_by=user,
        )
    return SaveResult(saved=True, value=", ".join(labels))


@transaction.atomic
def label_assignment_submit(*, assignment: Assignment, user: AbstractBaseUser) -> Assignment:
    """Lock a labelled user message: needs a dominant label (ranked) or at least one label
    (multi). Raises AssignmentIncomplete saying what is missing."""
    assignment = _locked_open(assignment)
    annotation = LabelAnnotation.objects.filter(
        rater_id=assignment.rater_id,
        conversation_id=assignment.conversation_id,
        run=None,
        repeat=0,
    ).first()
    if annotation is None or not annotation.labels:
        scheme = assignment.conversation.study.label_scheme
        what = "a dominant label" if scheme == Study.LabelScheme.RANKED else "at least one label"
        raise AssignmentIncomplete([("", [f"choose {what}"])])
    now = timezone.now()
    old_status = annotation.status
    annotation.status, annotation.assignment = LabelAnnotation.Status.COMPLETE, assignment
    annotation.save(update_fields=["status", "assignment", "updated_at"])
    LabelChange.objects.create(
        annotation=annotation,
        field="status",
        old_value=old_status,
        new_value="complete",
        changed_by=user,
    )
    assignment.status = Assignment.Status.SUBMITTED
    assignment.submitted_at = assignment.last_activity_at = now
    assignment.save(update_fields=["status", "submitted_at", "last_activity_at"])
    return assignment
