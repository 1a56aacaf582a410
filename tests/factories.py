"""Test data builders for every test directory, one per kind of row.

Keyword-only and named `<entity>_make`, like the services; they go through the services where
one exists (study_get_or_create, responders_ensure, role_add), so test data is made the way the
platform makes it. Importable without Django (models are imported where used): the judging
conftest imports it, and also serves the provider tests that run with `-p no:django`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from annotation.models import Rater, Rating, Study
    from judging.models import ModelEndpoint, Run

# The key endpoint_make stores: tests check that it never leaks into pages, logs or errors.
ENDPOINT_API_KEY = "sk-test-RunKeyThatMustNeverLeak-9876543210abcdef"

# Names chosen so that a leak is unmistakable in rendered HTML.
RESPONDERS = [
    ("zz-gpt4o", "Leaky GPT-4o", "leakyfamily-openai"),
    ("zz-claude", "Leaky Claude", "leakyfamily-anthropic"),
    ("zz-llama", "Leaky Llama", "leakyfamily-meta"),
    ("zz-human", "Leaky Human Reference", "leakyfamily-human"),
]


def study_make(
    *,
    name: str = "Rating study",
    conversations: int = 3,
    responders: Sequence[tuple[str, str, str]] | Sequence[str] = RESPONDERS,
    context: Callable[[int], str] | None = None,
    text: Callable[[int, str], str] | None = None,
) -> Study:
    """A rating study with the seed rubric: conversations c0, c1, … each with one response per
    responder.

    `responders` are (key, name, family) triples, or bare keys named as an import names them.
    `context(conversation_index)` and `text(conversation_index, responder_key)` give the texts.
    By default the responses' lengths differ by responder (a length-derived attribute would show
    up) and their metadata names the model: the blinding tests look for both.
    """
    from annotation.models import Conversation, Responder, Response
    from annotation.services import responders_ensure, study_get_or_create

    study, _ = study_get_or_create(name=name)
    if responders and isinstance(responders[0], str):
        by_key = responders_ensure(keys=set(responders))
        people = [by_key[key] for key in responders]  # type: ignore[index]
    else:
        people = [
            Responder.objects.get_or_create(key=key, defaults={"name": n, "family": f})[0]
            for key, n, f in responders
        ]
    made = Conversation.objects.bulk_create(
        Conversation(
            study=study,
            external_id=f"c{c}",
            context=context(c) if context else f"I feel anxious before meetings ({c}).",
        )
        for c in range(conversations)
    )
    Response.objects.bulk_create(
        Response(
            conversation=conversation,
            responder=r,
            text=text(c, r.key)
            if text
            else f"Supportive reply number {i} to conversation {c}." + " More." * i,
            metadata={} if text else {"model": f"{r.key}-model-id"},
        )
        for c, conversation in enumerate(made)
        for i, r in enumerate(people)
    )
    return study


def distortion_study_make(
    *, messages: Sequence[str], scheme: str = "ranked", name: str = ""
) -> Study:
    """A distortion-labelling study (the paper's label set) with one conversation per message,
    external ids m0, m1, …; a fresh name unless one is given."""
    from annotation.models import Conversation, Study
    from annotation.services import study_get_or_create

    study, _ = study_get_or_create(
        name=name or f"cd {uuid.uuid4().hex[:6]}",
        kind=Study.Kind.DISTORTION_LABELLING,
        label_scheme=scheme,
    )
    Conversation.objects.bulk_create(
        Conversation(study=study, external_id=f"m{i}", context=text)
        for i, text in enumerate(messages)
    )
    return study


def user_make(*, username: str, password: str = "", role: str = "", **extra: object) -> User:
    """An account (password "pw-<username>" unless given) with `role` (accounts.roles), no
    rater: what a page or a permission sees of a person."""
    from django.contrib.auth import get_user_model

    from accounts.roles import role_add

    user = get_user_model().objects.create_user(
        username=username, password=password or "pw-" + username, **extra
    )
    if role:
        role_add(user=user, role=role)
    return user


def clinician_make(*, username: str, password: str = "") -> Rater:
    """A clinician account (password "pw-<username>" unless given) and its rater."""
    from accounts.roles import CLINICIAN
    from annotation.models import Rater

    user = user_make(username=username, password=password, role=CLINICIAN)
    return Rater.objects.create(kind=Rater.Kind.CLINICIAN, name=username, user=user)


def case_context(c: int) -> str:
    """A conversation's opening message, for study_make(context=…) in the run tests."""
    return f"I have been feeling low for weeks and cannot sleep (case {c})."


def case_reply(c: int, key: str) -> str:
    """A short reply, for study_make(text=…) in the run tests."""
    return f"That sounds hard ({key} {c}). Talk to someone."


def texts_study_make(*, texts: dict[str, str] | Sequence[str]) -> tuple[Study, dict[str, int]]:
    """One conversation per text, one response each ("Try a regular bedtime. <text>"): returns
    (study, {label: response id}); a list of texts is labelled by position ("0", "1", …)."""
    from annotation.models import Response

    by_label = texts if isinstance(texts, dict) else {str(i): t for i, t in enumerate(texts)}
    labels = list(by_label)
    study = study_make(
        name=f"scenario study {uuid.uuid4().hex[:6]}",
        conversations=len(labels),
        responders=("gpt4o",),
        context=case_context,
        text=lambda i, key: f"Try a regular bedtime. {by_label[labels[i]]}",
    )
    ids = {
        labels[int(r.conversation.external_id[1:])]: r.id
        for r in Response.objects.filter(conversation__study=study).select_related("conversation")
    }
    return study, ids


def endpoint_make(*, base_url: str, provider: str = "openai", **overrides: object) -> ModelEndpoint:
    """An endpoint with a stored API key, a 5 s timeout and prices; a fresh name unless given."""
    from judging.models import ModelEndpoint

    options: dict[str, object] = {
        "name": f"fake-{provider}-{uuid.uuid4().hex[:6]}",
        "provider": provider,
        "model": f"fake-{provider}",
        "family": "fake",
        "base_url": base_url,
        "api_key": ENDPOINT_API_KEY,
        "timeout_s": 5.0,
        "price_input_per_mtok": 2.5,
        "price_output_per_mtok": 10.0,
    }
    options.update(overrides)
    return ModelEndpoint.objects.create(**options)


# The small study's responders: (key, is the human reference, mean quality of its responses).
SMALL_STUDY_RESPONDERS = [
    ("original", True, 3.0),
    ("m1", False, 4.2),
    ("m2", False, 3.6),
    ("m3", False, 2.8),
    ("m4", False, 4.6),
]


@dataclass
class SmallStudy:
    study: Study
    clinicians: list[Rater]
    judges: list[Rater]
    n_complete_scores: int


def _rating_make(rater, response, scores, attributes, **kwargs) -> Rating:
    from annotation.models import Rating, Score

    rating = Rating.objects.create(rater=rater, response=response, rationale="why", **kwargs)
    Score.objects.bulk_create(
        Score(rating=rating, attribute=a, value=int(v))
        for a, v in zip(attributes, scores, strict=True)
    )
    return rating


def workbook_make(*, path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> Path:
    """An .xlsx file at `path`: the header row, then `rows` (a MentalAlign-style workbook)."""
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(list(header))
    for row in rows:
        sheet.append(list(row))
    book.save(path)
    return path


def small_study_make() -> SmallStudy:
    """A small synthetic study with everything the dashboards use: texts, conditions, sources,
    two clinicians (overlapping, with assignments and presentation order), two judges (one with a
    self-preference exclusion), a draft and an invalid rating that must not count.

    On whatever database Django is set up with (the backup test builds it on a SQLite file from a
    subprocess); seeded, so every build holds the same scores."""
    import numpy as np
    from django.contrib.auth import get_user_model

    from annotation.models import (
        Assignment,
        AssignmentItem,
        Conversation,
        Rater,
        Rating,
        Responder,
        Response,
        Study,
    )
    from annotation.rater_codes import rater_codes_assign
    from annotation.services import rubric_get_or_create_default

    rng = np.random.default_rng(7)
    study = Study.objects.create(name="Small study", rubric=rubric_get_or_create_default())
    attributes = list(study.rubric.attributes.order_by("position"))
    responders = [
        Responder.objects.get_or_create(
            key=key, defaults={"name": key.upper(), "family": f"fam-{key}", "is_reference": ref}
        )[0]
        for key, ref, _ in SMALL_STUDY_RESPONDERS
    ]
    quality = {key: q for key, _, q in SMALL_STUDY_RESPONDERS}
    user_a = get_user_model().objects.create_user("dr_a")
    user_b = get_user_model().objects.create_user("dr_b")
    clinicians = [
        Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="dr_a", user=user_a),
        Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="dr_b", user=user_b),
    ]
    judges = [
        Rater.objects.create(kind=Rater.Kind.JUDGE, name="judge-x", excluded_responders=["m1"]),
        Rater.objects.create(kind=Rater.Kind.JUDGE, name="judge-y"),
    ]
    # The clinicians join the study (their study codes), as being given its work does.
    rater_codes_assign(study_id=study.pk, rater_ids=[c.pk for c in clinicians])
    n_scores = 0
    for c in range(8):
        conversation = Conversation.objects.create(
            study=study,
            external_id=f"c{c}",
            context=f"I feel worried about exams number {c}.",
            conditions=["anxiety"] if c % 2 else ["depression", "anxiety"],
            source="A" if c < 4 else "B",
        )
        responses = [
            Response.objects.create(
                conversation=conversation,
                responder=r,
                text=f"It sounds hard to feel worried about exams {c}, {r.key} suggests a walk.",
            )
            for r in responders
        ]
        raters = clinicians if c < 4 else clinicians[:1]  # dr_b overlaps on half
        for rater in raters:
            assignment = Assignment.objects.create(
                rater=rater, conversation=conversation, status="submitted"
            )
            order = rng.permutation(len(responses))
            for position, idx in enumerate(order):
                AssignmentItem.objects.create(
                    assignment=assignment, response=responses[idx], position=position
                )
            for response in responses:
                base = quality[response.responder.key]
                scores = np.clip(np.rint(base + rng.normal(0, 0.6, len(attributes))), 1, 5)
                _rating_make(
                    rater, response, scores, attributes, status="complete", source="form",
                    assignment=assignment,
                )  # fmt: skip
                n_scores += len(attributes)
        for shift, judge in zip((0.4, -0.2), judges, strict=True):
            for response in responses:
                base = quality[response.responder.key] + shift
                scores = np.clip(np.rint(base + rng.normal(0, 0.5, len(attributes))), 1, 5)
                _rating_make(judge, response, scores, attributes, status="complete", source="judge")
                n_scores += len(attributes)
    # Neither a draft nor an invalid rating may reach the analysis or the export.
    extra = Conversation.objects.create(study=study, external_id="draft", context="ctx")
    response = Response.objects.create(conversation=extra, responder=responders[1], text="t")
    _rating_make(clinicians[1], response, [1] * 7, attributes, status="draft", source="form")
    Rating.objects.create(
        rater=judges[0], response=response, status="invalid", source="judge", raw_output="oops"
    )
    return SmallStudy(study, clinicians, judges, n_scores)


# Five labelling runs per message, hand-built to hit each final-label rule (Appendix G of the
# distortions paper); None is an invalid answer.
DISTORTION_RUNS: dict[str, list[list[str] | None]] = {
    "m0": [
        ["Labeling"],
        ["Labeling", "Mental Filter"],
        ["Labeling"],
        ["Labeling"],
        ["Mind Reading"],
    ],
    "m1": [["No Distortion"]] * 5,
    "m2": [["Mental Filter"], ["Labeling"], ["No Distortion"], ["Overgeneralization"], None],
    "m3": [["Mental Filter"], ["Labeling"], ["Mind Reading"], ["Overgeneralization"], ["Others"]],
    "m4": [["Others", "Labeling"], ["Labeling"], ["Labeling"], ["Labeling"], ["Labeling"]],
}
# A clinician's labels of three of those messages.
DISTORTION_CLINICIAN_LABELS = {"m0": ["Labeling"], "m1": ["No Distortion"], "m4": ["Mental Filter"]}


def labelled_distortion_study_make() -> tuple[Study, Run]:
    """The study "CD dashboard": DISTORTION_RUNS as one labelling run of the judge "fake-cd"
    (five repeats) and DISTORTION_CLINICIAN_LABELS from the clinician "dr-who"."""
    from annotation.models import Conversation, LabelAnnotation, Rater, Study
    from annotation.rater_codes import rater_codes_assign
    from annotation.services import study_get_or_create
    from judging.models import ModelEndpoint, Run

    study, _ = study_get_or_create(
        name="CD dashboard", kind=Study.Kind.DISTORTION_LABELLING, label_scheme="ranked"
    )
    endpoint = ModelEndpoint.objects.create(
        name="fake-cd", provider="openai", model="fake", family="fake"
    )
    judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name="fake-cd")
    run = Run.objects.create(
        study=study, endpoint=endpoint, rater=judge, kind="labelling", repeats=5, temperature=0.5
    )
    clinician = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="dr-who")
    rater_codes_assign(study_id=study.pk, rater_ids=[clinician.pk])  # joins: their study code
    for ext, runs in DISTORTION_RUNS.items():
        conversation = Conversation.objects.create(
            study=study, external_id=ext, context=f"message {ext}"
        )
        for repeat, labels in enumerate(runs):
            LabelAnnotation.objects.create(
                rater=judge,
                conversation=conversation,
                run=run,
                repeat=repeat,
                status="complete" if labels is not None else "invalid",
                source="judge",
                labels=labels or [],
                others=["Self-Blame"] if labels and "Others" in labels else [],
            )
        if ext in DISTORTION_CLINICIAN_LABELS:
            LabelAnnotation.objects.create(
                rater=clinician,
                conversation=conversation,
                status="complete",
                source="form",
                labels=DISTORTION_CLINICIAN_LABELS[ext],
            )
    return study, run


def overlap_study_make(
    *, name: str = "Overlap study", conversations: int = 12, clinicians: int = 3
) -> tuple[Study, list[Rater], list[Rater]]:
    """A study where every clinician scores every response (ten responders), and two judges:
    "close-judge" (the responses' true quality, rounded) and "far-judge" (the scale turned
    upside down). Seeded: the same scores every build. Returns (study, clinicians, judges)."""
    import numpy as np

    from annotation.models import Rater, Response
    from annotation.rater_codes import rater_codes_assign

    keys = ["original", "gpt4o", "claude", "gemini", "llama_3", "qwen_2", "qwen_3", "ds_qwen",
            "ds_llama", "gpt4omini"]  # fmt: skip
    study = study_make(name=name, conversations=conversations, responders=keys)
    attributes = list(study.rubric.attributes.order_by("position"))
    people = [clinician_make(username=f"{name[:6].lower()}-clin{k}") for k in range(clinicians)]
    rater_codes_assign(study_id=study.pk, rater_ids=[p.pk for p in people])  # they join
    judges = [
        Rater.objects.create(kind=Rater.Kind.JUDGE, name="close-judge"),
        Rater.objects.create(kind=Rater.Kind.JUDGE, name="far-judge"),
    ]
    rng = np.random.default_rng(11)
    quality = dict(zip(keys, np.linspace(1.6, 4.6, len(keys)), strict=True))
    for response in Response.objects.filter(conversation__study=study).select_related("responder"):
        truth = quality[response.responder.key] + rng.normal(0, 0.7, len(attributes))
        for rater in people:
            noisy = np.clip(np.rint(truth + rng.normal(0, 0.6, len(attributes))), 1, 5)
            _rating_make(rater, response, noisy, attributes, status="complete", source="form")
        close = np.clip(np.rint(truth), 1, 5)
        _rating_make(judges[0], response, close, attributes, status="complete", source="judge")
        _rating_make(judges[1], response, 6 - close, attributes, status="complete", source="judge")
    return study, people, judges
