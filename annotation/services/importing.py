"""Studies, rubrics, responders and raters, and the imports that create them.

Each import parses the whole file before writing and writes in one transaction; importing the
same file again stores nothing twice.
"""

import json
from collections import Counter
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Model

from scoring.distortions import DEFAULT_DISTORTIONS, OTHERS
from scoring.parsing import parse_judge_output
from scoring.rubric import DEFAULT_ATTRIBUTES, DEFAULT_RUBRIC_NAME

from ..importers.base import ImportProblem
from ..importers.copy_load import (  # COPY on PostgreSQL, bulk_create elsewhere
    analyze_after_commit,
    bulk_insert,
    bulk_insert_values,
)
from ..importers.limits import ImportLimits
from ..importers.mentalalign import FLAGGED, NOT_RATED, Workbook
from ..importers.mentalbench import ConversationRecord
from ..models import (
    Attribute,
    AttributeLevel,
    Conversation,
    DistortionLabel,
    ImportLog,
    LabelAnnotation,
    Rater,
    Rating,
    Responder,
    Response,
    Rubric,
    Score,
    Study,
)
from ..rater_codes import rater_codes_assign
from ..responders import KNOWN_RESPONDERS, paper_judge_defaults

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
    user: User | None = None,
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
    for conversation in bulk_insert(new_conversations):
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
                new_responses.append((conversation_id, responder.pk, text))
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
    bulk_insert_values(Response, ("conversation_id", "responder_id", "text"), new_responses)
    Response.objects.bulk_update(filled, ["text"], batch_size=BATCH)
    # The study and its responders as well: a table never analyzed misleads the planner.
    analyze_after_commit(
        {
            Conversation: len(new_conversations),
            Response: len(new_responses) + len(filled),
            Study: 1,
            Responder: 1,
        }
    )
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


def human_workbook_sources(
    *, study: Study, workbook: Workbook, sha256: str, rater_name: str
) -> list[WorkbookSource]:
    """The clinicians' workbook as rater sources: one rater (`rater_name`) for a workbook
    without a Clinician column, as the MentalAlign-70k release; one per code for a released
    study's workbook, named "<study> <code>" so that C01 of one study is not C01 of another."""
    if not workbook.clinicians:
        rater = clinician_rater_get_or_create(name=rater_name)
        return [WorkbookSource(workbook=workbook, rater=rater, sha256=sha256)]
    return [
        WorkbookSource(
            workbook=workbook.for_clinician(code),
            rater=clinician_rater_get_or_create(name=f"{study.name} {code}"),
            sha256=sha256,
        )
        for code in workbook.clinicians
    ]


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
    for conversation in bulk_insert(new):
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
    for response in bulk_insert(new):
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
    user: User | None = None,
) -> list[dict]:
    """Store every parseable cell as a complete rating (with its raw text) and every unparseable
    one as an invalid rating (raw text and reason, no scores); count empty cells and the
    `[not rated]` / `[flagged]` markers of a released study (stored as nothing). All sources
    are one transaction. With `strict`, the first unusable cell aborts the whole import.
    Re-importing stores nothing twice (existing rater/response ratings are kept).
    """
    rubric = study.rubric
    attributes = list(rubric.attributes.all())
    names = [a.name for a in attributes]
    scale = (rubric.scale_min, rubric.scale_max)
    summaries = []
    # Rows written per table (an upper bound for conversations and responses, most of which a
    # second workbook finds present): analyze_after_commit decides what needs new statistics.
    written: Counter[type[Model]] = Counter()
    for source in sources:
        workbook, rater = source.workbook, source.rater
        conversations, problems = _conversations_for_workbook(study, workbook, strict=strict)
        responses = _responses_for_workbook(study, workbook, conversations)
        written[Conversation] += len(conversations)
        written[Response] += len(responses)
        existing = dict(
            Rating.objects.filter(
                rater=rater, run__isnull=True, repeat=0, response_id__in=list(responses.values())
            ).values_list("response_id", "raw_output")
        )
        read = _cells_read(
            workbook=workbook,
            rater_id=rater.pk,
            responses=responses,
            existing=existing,
            attributes=names,
            scale=scale,
            strict=strict,
        )
        problems += read.problems
        counts = read.counts
        rating_ids = bulk_insert_values(
            Rating,
            ("rater_id", "response_id", "run_id", "repeat", "status", "source", "rationale",
             "overall", "raw_output", "error"),
            read.ratings,
        )  # fmt: skip
        by_name = {a.name: a for a in attributes}
        score_ids = bulk_insert_values(
            Score,
            ("rating_id", "attribute_id", "value"),
            (
                (rating_id, by_name[name].pk, value)
                for rating_id, scores in zip(rating_ids, read.scores, strict=True)
                for name, value in scores.items()
            ),
        )
        written[Rating] += len(rating_ids)
        written[Score] += len(score_ids)
        summary = {
            "file": workbook.file,
            "rater": rater.name,
            "cells": len(workbook.cells),
            "stored": counts["stored"],
            "invalid": counts["invalid"],
            "all_zero": counts["all_zero"],
            "empty": counts["empty"],
            "not_rated": counts["not_rated"],
            "flagged": counts["flagged"],
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
    # The workbooks' clinicians have joined the study: their codes, in the import's transaction,
    # so the first page that shows the imported ratings has nothing to hand out.
    rater_codes_assign(study_id=study.pk, rater_ids=[source.rater.pk for source in sources])
    # The small tables every report joins: a table never analyzed misleads the planner (the
    # frame's read took 0.56 s after a four-judge import, 0.34 s after ANALYZE).
    for small in (Rater, Responder, Study, Attribute):
        written[small] += 1
    analyze_after_commit(written)
    return summaries


@dataclass
class _ReadCells:
    """A workbook's cells as `mentalalign_import` stores them."""

    # Rows of values, not Rating objects: building 30,000 model objects took longer than the
    # COPY that stores them (copy_load.bulk_insert_values).
    ratings: list[tuple[object, ...]]
    scores: list[dict[str, int]]  # each rating's parsed scores, in the order of `ratings`
    counts: Counter[str]
    problems: list[dict]


def _cells_read(
    *,
    workbook: Workbook,
    rater_id: int,
    responses: dict[tuple[str, str], int],
    existing: dict[int, str],
    attributes: list[str],
    scale: tuple[int, int],
    strict: bool,
) -> _ReadCells:
    """Each cell parsed into a rating to store (complete, or invalid with its raw text and
    reason), or counted: present already, a release's marker, empty. `existing` holds the raw
    output of each response the rater's stored ratings cover."""
    read = _ReadCells(ratings=[], scores=[], counts=Counter(), problems=[])
    counts, problems = read.counts, read.problems
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
        if raw.strip() in (NOT_RATED, FLAGGED):
            # A released study's marker: nothing to store, and not a problem of the file.
            counts["flagged" if raw.strip() == FLAGGED else "not_rated"] += 1
            continue
        if not raw.strip():
            counts["empty"] += 1
            problems.append(_problem(workbook, cell, "empty cell"))
            if strict:
                raise ImportProblem(
                    "empty cell", file=workbook.file, row=cell.row, column=cell.column
                )
            continue
        parsed = parse_judge_output(raw, attributes, scale)
        if parsed.error is not None:  # i.e. not parsed.ok, spelled so mypy sees a str
            if strict:
                raise ImportProblem(
                    parsed.error, file=workbook.file, row=cell.row, column=cell.column
                )
            counts["invalid"] += 1
            if all_zero_cell(raw=raw, attributes=attributes):
                counts["all_zero"] += 1
            problems.append(_problem(workbook, cell, parsed.error))
        else:
            counts["stored"] += 1
        read.ratings.append(
            (
                rater_id,
                response_id,
                None,
                0,
                (Rating.Status.COMPLETE if parsed.ok else Rating.Status.INVALID).value,
                Rating.Source.IMPORT.value,
                parsed.explanation,
                parsed.overall,
                raw,
                parsed.error or "",
            )
        )
        read.scores.append(parsed.scores)
    return read


def all_zero_cell(*, raw: str, attributes: list[str]) -> bool:
    """A cell whose every attribute is 0: in the MentalAlign-70k release, the clinicians' mark
    for a response with nothing to rate (the scale is 1–5; the judges score those responses 1
    nearly always). Stored as an invalid rating like any score off the scale, and counted."""
    text = raw.strip().removeprefix("```json").removesuffix("```").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and all(data.get(name) == 0 for name in attributes)


def _problem(workbook: Workbook, cell, reason: str) -> dict:
    return {
        "file": workbook.file,
        "row": cell.row,
        "column": cell.column.strip(),
        "conversation": cell.conversation,
        "responder": cell.responder,
        "reason": reason,
    }
