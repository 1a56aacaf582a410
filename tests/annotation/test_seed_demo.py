"""The demo (`seed_demo`, run by bin/up) shows every feature at once and is idempotent."""

import io

import pytest
from django.core.management import call_command
from django.test import Client

from annotation.models import (
    Assignment,
    Conversation,
    DistortionLabel,
    Rater,
    ReferenceScore,
    Response,
    Study,
)
from annotation.training import practice_assign, practice_ready


def _seed() -> str:
    out = io.StringIO()
    call_command("seed_demo", stdout=out)
    return out.getvalue()


def _snapshot() -> dict:
    """Everything seed_demo writes, as comparable values."""
    return {
        "studies": sorted(Study.objects.values_list("name", "kind", "label_scheme")),
        "conversations": sorted(
            Conversation.objects.values_list("study__name", "external_id", "practice")
        ),
        "responses": Response.objects.count(),
        "assignments": sorted(
            Assignment.objects.values_list(
                "conversation__external_id", "rater__name", "kind", "status", "token"
            )
        ),
        "references": sorted(
            ReferenceScore.objects.values_list(
                "response__responder__key", "attribute__name", "value", "set_at"
            )
        ),
        "labels": DistortionLabel.objects.count(),
    }


def test_seed_demo_assigns_every_demo_conversation_to_every_clinician_once(db):
    _seed()
    _seed()  # idempotent
    demo = Assignment.objects.filter(conversation__study__name="Demo study")
    assert demo.count() == 18
    assert sorted(set(demo.values_list("rater__name", flat=True))) == [
        "clinician1",
        "clinician2",
        "clinician3",
    ]
    assert all(a.items.count() == 10 for a in demo)


def test_a_second_run_changes_nothing(db):
    first = _seed()
    before = _snapshot()
    second = _seed()
    assert _snapshot() == before
    assert "0 conversations and 0 responses created, 0 practice reference scores" in second
    assert "0 assignments created" in second and "0 assignments created" not in first


def test_an_account_made_by_hand_in_another_case_is_taken_as_the_demos(db, django_user_model):
    django_user_model.objects.create_user(username="Clinician1")
    _seed()
    names = set(django_user_model.objects.values_list("username", flat=True))
    assert names == {
        "admin", "Clinician1", "clinician2", "clinician3", "researcher", "researcher2", "lead1",
        "lead2",
    }  # fmt: skip


def test_the_two_demo_studies_have_different_teams(db, django_user_model):
    from accounts.roles import RESEARCHER, role_add
    from annotation.membership import studies_for

    role_add(
        user=django_user_model.objects.create_user(username="researcher"), role=RESEARCHER
    )  # an earlier demo's platform-wide researcher
    _seed()
    seen = {
        name: sorted(
            studies_for(user=django_user_model.objects.get(username=name)).values_list(
                "name", flat=True
            )
        )
        for name in ("lead1", "researcher", "lead2", "researcher2", "clinician1")
    }
    assert seen == {
        "lead1": ["Demo study"],
        "researcher": ["Demo study"],
        "lead2": ["Demo distortion study"],
        "researcher2": ["Demo distortion study"],
        "clinician1": [],  # rates, reads no results
    }
    sites = set(Study.objects.get(name="Demo study").members.values_list("site", flat=True))
    assert sites == {"North hospital", "South hospital"}


def test_training_can_be_tried_at_once_on_the_practice_conversation(db):
    _seed()
    study = Study.objects.get(name="Demo study")
    practice = Conversation.objects.get(study=study, practice=True)
    assert practice.external_id == "demo-practice"
    # Never real work: nobody holds it, and every real conversation is assigned.
    assert not Assignment.objects.filter(conversation=practice).exists()
    ready, incomplete = practice_ready(study=study)
    assert ready == [practice.pk] and incomplete == []
    assert ReferenceScore.objects.filter(response__conversation=practice).count() == 3 * 7
    # What an admin's "Assign practice" does: clinician1 gets it, first in the queue.
    clinician = Rater.objects.get(name="clinician1")
    (given,) = practice_assign(study=study, clinicians=[clinician])
    assert given.kind == Assignment.Kind.PRACTICE and given.items.count() == 3
    _seed()  # a later run leaves the practice work alone
    assert Assignment.objects.filter(conversation=practice).count() == 1


def test_the_distortion_study_is_labelled_by_every_clinician(db):
    _seed()
    study = Study.objects.get(name="Demo distortion study")
    assert study.kind == Study.Kind.DISTORTION_LABELLING
    assert study.conversations.count() == 6
    assert DistortionLabel.objects.filter(study=study).filter(name="No Distortion").exists()
    labelling = Assignment.objects.filter(conversation__study=study)
    assert labelling.count() == 18
    assert sorted(set(labelling.values_list("rater__name", flat=True))) == [
        "clinician1",
        "clinician2",
        "clinician3",
    ]
    # clinician1 can open one: the labelling page, not the rating page.
    client = Client()
    client.force_login(Rater.objects.get(name="clinician1").user)
    page = client.get(f"/rate/{labelling.filter(rater__name='clinician1').first().token}/")
    assert page.status_code == 200 and 'id="label-form"' in page.content.decode()


@pytest.mark.parametrize("kind", ["generation", "judge", "labelling"])
def test_with_the_local_model_registered_every_run_kind_launches(db, kind):
    """Nothing but seed_demo and the local model's registration (bin/local-model) is needed."""
    from judging import local_model, services

    _seed()
    plain, _structured = services.local_endpoints_register(
        base_url="http://127.0.0.1:9/v1", model=local_model.MODEL_ALIAS
    )
    demo = Study.objects.get(name="Demo study")
    if kind == "generation":
        (run,) = services.generation_runs_create(study_id=demo.pk, endpoints=[plain])
    elif kind == "judge":
        run = services.judge_run_create(study_id=demo.pk, endpoint=plain)
    else:
        labelling = Study.objects.get(name="Demo distortion study")
        run = services.labelling_run_create(study_id=labelling.pk, endpoint=plain)
    assert run.kind == kind and run.items.exists()
