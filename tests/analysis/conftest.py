"""A small synthetic study with everything the dashboards use: texts, conditions, sources, two
clinicians (overlapping, with assignments and presentation order), two judges (one with a
self-preference exclusion), a draft and an invalid rating that must not count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from django.contrib.auth import get_user_model

from annotation.models import (
    Assignment,
    AssignmentItem,
    Conversation,
    Rater,
    Rating,
    Responder,
    Response,
    Score,
    Study,
)
from annotation.roles import CLINICIAN, role_add
from annotation.services import rubric_get_or_create_default

RESPONDERS = [("original", True, 3.0), ("m1", False, 4.2), ("m2", False, 3.6), ("m3", False, 2.8)]
RESPONDERS += [("m4", False, 4.6)]


@dataclass
class SmallStudy:
    study: Study
    clinicians: list[Rater]
    judges: list[Rater]
    n_complete_scores: int


def _rate(rater, response, scores, attributes, **kwargs) -> Rating:
    rating = Rating.objects.create(rater=rater, response=response, rationale="why", **kwargs)
    Score.objects.bulk_create(
        Score(rating=rating, attribute=a, value=int(v))
        for a, v in zip(attributes, scores, strict=True)
    )
    return rating


@pytest.fixture
def small_study(db) -> SmallStudy:
    return small_study_build()


def small_study_build() -> SmallStudy:
    """The study itself, on whatever database Django is set up with (the backup test builds it
    on a SQLite file from a subprocess)."""
    rng = np.random.default_rng(7)
    study = Study.objects.create(name="Small study", rubric=rubric_get_or_create_default())
    attributes = list(study.rubric.attributes.order_by("position"))
    responders = [
        Responder.objects.get_or_create(
            key=key, defaults={"name": key.upper(), "family": f"fam-{key}", "is_reference": ref}
        )[0]
        for key, ref, _ in RESPONDERS
    ]
    quality = {key: q for key, _, q in RESPONDERS}
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
                _rate(
                    rater, response, scores, attributes, status="complete", source="form",
                    assignment=assignment,
                )  # fmt: skip
                n_scores += len(attributes)
        for shift, judge in zip((0.4, -0.2), judges, strict=True):
            for response in responses:
                base = quality[response.responder.key] + shift
                scores = np.clip(np.rint(base + rng.normal(0, 0.5, len(attributes))), 1, 5)
                _rate(judge, response, scores, attributes, status="complete", source="judge")
                n_scores += len(attributes)
    # Neither a draft nor an invalid rating may reach the analysis or the export.
    extra = Conversation.objects.create(study=study, external_id="draft", context="ctx")
    response = Response.objects.create(conversation=extra, responder=responders[1], text="t")
    _rate(clinicians[1], response, [1] * 7, attributes, status="draft", source="form")
    Rating.objects.create(
        rater=judges[0], response=response, status="invalid", source="judge", raw_output="oops"
    )
    return SmallStudy(study, clinicians, judges, n_scores)


def _user(username: str, role: str | None, **extra):
    user = get_user_model().objects.create_user(username, password="pw-12345678", **extra)
    if role:
        role_add(user=user, role=role)
    return user


@pytest.fixture
def clinician_user(db):
    return _user("clin", CLINICIAN)
