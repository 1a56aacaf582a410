"""Django's admin: every model registered and viewable; work records view-only there."""

import random

import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse

from annotation.models import Assignment, ImportLog, LabelAnnotation, Rating, RatingChange, Score
from annotation.services import assignments_create, rating_save
from tests.factories import clinician_make, study_make

APPS = ("annotation", "judging", "analysis")


def test_every_model_is_registered_in_the_admin():
    """Each model has its own admin page or is shown inline on its parent's (levels on the
    attribute, items on the assignment, scores on the rating, …)."""
    inline = {i.model for m in admin.site._registry.values() for i in m.inlines}
    missing = [
        model.__name__
        for app in APPS
        for model in apps.get_app_config(app).get_models()
        if not admin.site.is_registered(model) and model not in inline
    ]
    assert missing == []


@pytest.fixture
def rated(db, django_user_model, client):
    study = study_make(conversations=1)
    clinician = clinician_make(username="dana")
    (assignment,) = assignments_create(
        study=study, clinicians=[clinician], seed_rng=random.Random(1)
    )
    item = assignment.items.first()
    attribute = study.rubric.attributes.first()
    rating_save(
        assignment=assignment,
        item_token=item.token,
        user=clinician.user,
        attribute_id=attribute.pk,
        score=4,
    )
    boss = django_user_model.objects.create_superuser("boss", password="pw")
    client.force_login(boss)
    assignment.refresh_from_db()
    return client, assignment, Rating.objects.get()


def test_every_changelist_opens_for_a_superuser(rated):
    client, _, _ = rated
    for app in APPS:
        for model in apps.get_app_config(app).get_models():
            if not admin.site.is_registered(model):
                continue
            url = reverse(f"admin:{app}_{model._meta.model_name}_changelist")
            assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("model", [Assignment, Rating, RatingChange, LabelAnnotation, ImportLog])
def test_work_records_are_view_only_in_the_admin(rated, model):
    """Ratings, labels and assignments change only through the services (row lock + audit
    trail); even a superuser cannot add, edit or delete them in Django's admin."""
    client, assignment, rating = rated
    name = f"admin:annotation_{model._meta.model_name}"
    assert client.get(reverse(f"{name}_add")).status_code == 403
    obj = {Assignment: assignment, Rating: rating, RatingChange: rating.changes.first()}.get(model)
    if obj is None:
        return
    change = reverse(f"{name}_change", args=[obj.pk])
    page = client.get(change)
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert client.post(change, {"status": "complete"}).status_code == 403
    assert client.post(reverse(f"{name}_delete", args=[obj.pk])).status_code == 403
    assert Score.objects.get().value == 4 and Rating.objects.get().status == "draft"
    assert Assignment.objects.get().status == assignment.status


def test_a_rubric_in_use_keeps_its_meaning_in_the_admin(rated):
    """Once scores exist, a rubric's name, scale, attributes (name, group, position) and level
    values are read-only and none is added or deleted: an edit would change what every stored
    score means. Descriptions and anchor texts may still be corrected."""
    from annotation.models import Attribute

    client, assignment, _ = rated
    rubric = assignment.conversation.study.rubric
    page = client.get(reverse("admin:annotation_rubric_change", args=[rubric.pk])).content.decode()
    assert 'name="scale_max"' not in page and 'name="name"' not in page
    assert 'name="attributes-0-name"' not in page and 'name="attributes-0-description"' in page
    assert 'name="attributes-__prefix__-description"' not in page  # no new attribute row
    attribute = rubric.attributes.order_by("position").first()
    url = reverse("admin:annotation_attribute_change", args=[attribute.pk])
    page = client.get(url).content.decode()
    assert 'name="name"' not in page and 'name="position"' not in page
    assert 'name="description"' in page
    assert 'name="levels-0-value"' not in page and 'name="levels-0-anchor"' in page
    assert (
        client.post(reverse("admin:annotation_attribute_delete", args=[attribute.pk])).status_code
        == 403
    )
    before = Attribute.objects.count()
    added = client.post(
        reverse("admin:annotation_attribute_add"),
        {
            "rubric": rubric.pk, "name": "Warmth", "group": "OTHER", "description": "",
            "position": 99, "levels-TOTAL_FORMS": 0, "levels-INITIAL_FORMS": 0,
        },
    )  # fmt: skip
    assert added.status_code == 200
    assert f"Rubric {rubric.name!r} has scores" in added.content.decode().replace("&#x27;", "'")
    assert Attribute.objects.count() == before


def test_a_rubric_without_scores_stays_editable_in_the_admin(rated):
    from annotation.models import Rubric

    client, _, _ = rated
    draft = Rubric.objects.create(name="Draft rubric")
    page = client.get(reverse("admin:annotation_rubric_change", args=[draft.pk])).content.decode()
    assert 'name="scale_max"' in page and 'name="name"' in page
    assert 'name="attributes-__prefix__-name"' in page


def test_a_study_with_ratings_keeps_its_rubric_and_kind_in_the_admin(rated):
    from annotation.models import Study

    client, assignment, _ = rated
    study = assignment.conversation.study
    page = client.get(reverse("admin:annotation_study_change", args=[study.pk])).content.decode()
    assert 'name="rubric"' not in page and 'name="kind"' not in page
    assert 'name="description"' in page
    empty = Study.objects.create(name="Nothing rated yet", rubric=study.rubric)
    page = client.get(reverse("admin:annotation_study_change", args=[empty.pk])).content.decode()
    assert 'name="rubric"' in page and 'name="kind"' in page


def test_what_was_rated_stays_as_it_was_rated_in_the_admin(rated):
    """A rated conversation's text, its responses (text, responder) and the rater's account are
    shown read-only, and the rated response cannot be deleted (its ratings would go with it)."""
    client, assignment, rating = rated
    conversation = assignment.conversation
    url = reverse("admin:annotation_conversation_change", args=[conversation.pk])
    page = client.get(url).content.decode()
    assert 'name="context"' not in page and 'name="practice"' not in page
    assert 'name="conditions"' in page  # metadata for filters stays editable
    assert 'name="responses-0-text"' not in page and 'name="responses-0-DELETE"' not in page
    assert 'name="responses-__prefix__-text"' not in page  # no response added
    delete = reverse("admin:annotation_conversation_delete", args=[conversation.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403
    page = client.get(
        reverse("admin:annotation_rater_change", args=[rating.rater_id])
    ).content.decode()
    assert 'name="user"' not in page and 'name="kind"' not in page and 'name="model"' in page
    response_url = reverse("admin:annotation_response_change", args=[rating.response_id])
    page = client.get(response_url).content.decode()
    assert 'name="text"' not in page and 'name="responder"' not in page
    response_delete = reverse("admin:annotation_response_delete", args=[rating.response_id])
    assert client.post(response_delete, {"post": "yes"}).status_code == 403
    for model in ("conversation", "response", "attribute"):  # no "delete selected" action
        changelist = client.get(reverse(f"admin:annotation_{model}_changelist"))
        assert 'value="delete_selected"' not in changelist.content.decode()
    responder = rating.response.responder
    page = client.get(
        reverse("admin:annotation_responder_change", args=[responder.pk])
    ).content.decode()
    assert 'name="key"' not in page and 'name="name"' in page
    assert Rating.objects.filter(pk=rating.pk).exists()


def test_an_unrated_conversation_stays_editable_in_the_admin(rated):
    from annotation.models import Conversation

    client, assignment, _ = rated
    fresh = Conversation.objects.create(
        study=assignment.conversation.study, external_id="new", context="Not rated yet."
    )
    page = client.get(
        reverse("admin:annotation_conversation_change", args=[fresh.pk])
    ).content.decode()
    assert 'name="context"' in page and 'name="responses-__prefix__-text"' in page
