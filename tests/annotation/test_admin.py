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
