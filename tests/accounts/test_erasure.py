"""Erasure on request: a person's personal data goes, everywhere in the database, while their
ratings stay under a pseudonym; their sessions and tokens end; the erasure is recorded."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from accounts.models import ErasureRecord, SignInEvent
from accounts.roles import RESEARCHER, role_add
from accounts.services import ErasureError, api_token_create, person_erase
from annotation.models import Rater, Rating
from tests.factories import small_study_make, user_make

NAME, ADDRESS = "dr_jane_doe", "jane.doe@hospital.example"


def _database_text() -> str:
    out = io.StringIO()
    call_command("dumpdata", "--natural-foreign", stdout=out)
    return out.getvalue()


@pytest.fixture
def jane(db):
    study = small_study_make()
    rater = study.clinicians[0]
    user = rater.user or user_make(username="tmp-jane")
    user.username, user.email, user.first_name, user.last_name = NAME, ADDRESS, "Jane", "Doe"
    user.set_password("a-long-pass-phrase-42")
    user.save()
    rater.user = user
    rater.name = NAME
    rater.save()
    role_add(user=user, role=RESEARCHER)  # a clinician who also reads results: holds a token
    api_token_create(user=user, days=30, name="notebook")
    SignInEvent.objects.create(user=user, username=NAME, succeeded=True, ip_address="10.0.0.7")
    SignInEvent.objects.create(username=NAME.upper(), succeeded=False, ip_address="10.0.0.7")
    return user, rater, study


def test_erasure_removes_the_person_and_keeps_their_ratings(jane, client):
    user, rater, study = jane
    client.force_login(user)
    ratings = Rating.objects.filter(rater=rater).count()
    assert ratings and NAME in _database_text() and ADDRESS in _database_text()

    record = person_erase(user_id=user.pk, reason="request 2026-17")

    text = _database_text()
    assert NAME not in text.lower() and ADDRESS not in text and "Doe" not in text
    user.refresh_from_db()
    assert user.username == f"erased-{user.pk}" and not user.is_active
    assert not user.has_usable_password()
    assert Rating.objects.filter(rater=rater).count() == ratings  # the research data stays
    assert Rater.objects.get(pk=rater.pk).name == f"erased-clinician-{rater.pk}"
    # Its session and its tokens end.
    assert client.get(reverse("annotation:queue")).status_code == 302
    assert record.account_id == user.pk and record.reason == "request 2026-17"
    assert record.removed["API tokens"] >= 1 and record.removed["sign-in log entries"] >= 1
    assert ErasureRecord.objects.count() == 1


def test_an_admin_cannot_erase_an_account_with_more_rights(db):
    admin = user_make(username="admin1", role="admin")
    superuser = get_user_model().objects.create_superuser("root1", password="x-long-pass-99")
    with pytest.raises(ErasureError, match="fewer rights"):
        person_erase(user_id=superuser.pk, actor=admin)
    superuser.refresh_from_db()
    assert superuser.username == "root1" and not ErasureRecord.objects.exists()


def test_the_command_says_what_it_would_erase_and_erases_with_yes(jane):
    user, _, _ = jane
    out = io.StringIO()
    call_command("erase_person", "--username", NAME, stdout=out)
    assert "Run again with --yes" in out.getvalue()
    assert get_user_model().objects.get(pk=user.pk).username == NAME  # nothing done yet
    out = io.StringIO()
    call_command("erase_person", "--username", NAME.upper(), "--yes", stdout=out)
    assert f"Erased account {user.pk}" in out.getvalue()
    assert NAME not in _database_text().lower()
    with pytest.raises(CommandError, match="no account named"):
        call_command("erase_person", "--username", NAME, "--yes")
