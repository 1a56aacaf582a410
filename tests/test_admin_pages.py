"""Every page of Django's admin opens for staff: each registered model's changelist, and the
change page of a real row of it. A row for each model is made here generically (required fields
filled, foreign keys pointing at rows made the same way), so a model registered tomorrow is
covered without a line added."""

from __future__ import annotations

import datetime
import decimal
import itertools
import uuid

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.db import models
from django.urls import reverse
from django.utils import timezone

_serial = itertools.count(1)
# Nullable fields a model's check constraints require all the same (a run item has a target).
ALSO_FILL = {"judging.runitem": {"response"}}


def _value(field: models.Field):
    if field.choices:
        return field.choices[0][0]
    n = next(_serial)
    if isinstance(field, models.JSONField):
        return field.get_default()
    if isinstance(field, models.BooleanField):
        return False
    if isinstance(field, models.DateTimeField):
        return timezone.now()
    if isinstance(field, models.DateField):
        return datetime.date.today()
    if isinstance(field, models.DurationField):
        return datetime.timedelta(seconds=1)
    if isinstance(field, models.DecimalField):
        return decimal.Decimal("1")
    if isinstance(field, models.FloatField):
        return 1.0
    if isinstance(field, models.IntegerField):
        return 1
    if isinstance(field, models.UUIDField):
        return uuid.uuid4()
    if isinstance(field, models.GenericIPAddressField):
        return "192.0.2.1"
    if isinstance(field, models.EmailField):
        return f"x{n}@example.org"
    if isinstance(field, models.URLField):
        return "http://127.0.0.1/"
    if isinstance(field, models.CharField | models.TextField):
        text = f"x{n}"
        return text[: field.max_length] if field.max_length else text
    return field.get_default()


def _knox_token() -> models.Model:
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    return AuthToken.objects.create(user=a_row(get_user_model()))[0]


# Models whose manager's create() makes the row its own way.
MAKERS = {"knox.authtoken": _knox_token}


def a_row(model: type[models.Model]) -> models.Model:
    """The model's first row, or a new one with every required field filled."""
    existing = model._default_manager.order_by("pk").first()
    if existing is not None:
        return existing
    if model._meta.label_lower in MAKERS:
        return MAKERS[model._meta.label_lower]()
    values = {}
    also = ALSO_FILL.get(model._meta.label_lower, set())
    for field in model._meta.concrete_fields:
        # A one-to-one primary key (a row that extends another model's) is a relation to fill.
        own_key = field.primary_key and not field.is_relation
        if own_key or field.has_default() or (field.null and field.name not in also):
            continue
        if isinstance(field, models.DateTimeField | models.DateField) and (
            field.auto_now or field.auto_now_add
        ):
            continue
        if field.is_relation:
            values[field.name] = a_row(field.related_model)
        else:
            values[field.name] = _value(field)
    return model._default_manager.create(**values)


@pytest.fixture
def staff_client(client, django_user_model):
    """A staff member who may view every model (Django's admin shows a model to staff only with
    a permission on it)."""
    staff = django_user_model.objects.create_user("staffer", password="pw-staff-long-enough")
    staff.is_staff = True
    staff.save()
    staff.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    client.force_login(staff)
    return client


def test_every_admin_changelist_and_change_page_opens_for_staff(db, staff_client):
    opened = []
    for model in admin.site._registry:
        row = a_row(model)
        meta = model._meta
        for url in (
            reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"),
            reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk]),
        ):
            response = staff_client.get(url)
            assert response.status_code == 200, (url, response.status_code)
            opened.append(url)
    assert len(opened) == 2 * len(admin.site._registry)


def test_a_view_only_endpoint_page_shows_no_stored_key(db, staff_client):
    from judging.models import ModelEndpoint

    endpoint = ModelEndpoint.objects.create(
        name="e", provider="openai", model="m", family="f", api_key="sk-secret-typed-key-0123"
    )
    page = staff_client.get(
        reverse("admin:judging_modelendpoint_change", args=[endpoint.pk])
    ).content.decode()
    assert "fernet:" not in page and "sk-secret-typed-key" not in page
    assert "Key set" in page
