"""Researchers' own API tokens: hashed at rest, shown once, expiring, revocable, throttled."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.services import TokenError, api_token_create


def _create(client, days: int = 30) -> str:
    response = client.post(reverse("accounts:tokens"), {"days": days})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    return re.search(r'id="token-value">([0-9a-f]+)<', response.content.decode()).group(1)


def _api(token: str):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get("/api/studies/")


def test_a_researcher_creates_a_token_that_is_shown_once_and_works(client, researcher):
    client.force_login(researcher)
    token = _create(client, days=30)
    assert _api(token).status_code == 200
    page = client.get(reverse("accounts:tokens")).content.decode()
    assert token not in page and token[:6] in page  # listed by its first characters only
    (stored,) = AuthToken.objects.filter(user=researcher)
    assert token not in (stored.digest, stored.token_key)
    assert timedelta(days=29) < stored.expiry - timezone.now() <= timedelta(days=30)


def test_the_raw_token_is_nowhere_in_the_database(client, researcher):
    client.force_login(researcher)
    token = _create(client)
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(t)::text FROM knox_authtoken t")
        rows = [r[0] for r in cursor.fetchall()]
    assert rows and not any(token in row for row in rows)
    assert "authtoken_token" not in connection.introspection.table_names()


def test_a_revoked_token_is_refused(client, researcher):
    client.force_login(researcher)
    token = _create(client)
    (stored,) = AuthToken.objects.filter(user=researcher)
    response = client.post(reverse("accounts:token_revoke", args=[stored.digest]))
    assert response.status_code == 302
    assert _api(token).status_code == 401
    assert "No tokens." in client.get(reverse("accounts:tokens")).content.decode()


def test_an_expired_token_is_refused(researcher):
    stored, token = api_token_create(user=researcher, days=1)
    assert _api(token).status_code == 200
    AuthToken.objects.filter(pk=stored.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    assert _api(token).status_code == 401


def test_nobody_revokes_another_users_token(client, researcher, django_user_model):
    from accounts.roles import RESEARCHER, role_add

    other = django_user_model.objects.create_user("otto", password="pw-otto-long-enough")
    role_add(user=other, role=RESEARCHER)
    stored, token = api_token_create(user=other, days=7)
    client.force_login(researcher)
    response = client.post(reverse("accounts:token_revoke", args=[stored.digest]))
    assert response.status_code == 404
    assert _api(token).status_code == 200


def test_clinicians_get_no_tokens(client, clinician):
    client.force_login(clinician)
    assert client.get(reverse("accounts:tokens")).status_code == 403
    assert client.post(reverse("accounts:tokens"), {"days": 30}).status_code == 403
    assert not AuthToken.objects.exists()


@pytest.mark.parametrize("days", [0, 366, 10_000])
def test_a_token_lasts_a_bounded_time(client, researcher, days):
    client.force_login(researcher)
    response = client.post(reverse("accounts:tokens"), {"days": days})
    assert response.status_code == 422
    assert not AuthToken.objects.exists()
    with pytest.raises(TokenError, match="1 to 365 days"):
        api_token_create(user=researcher, days=days)


def test_the_number_of_live_tokens_is_capped(client, researcher, settings):
    settings.API_TOKENS_PER_USER = 2
    client.force_login(researcher)
    _create(client)
    _create(client)
    response = client.post(reverse("accounts:tokens"), {"days": 30})
    assert response.status_code == 422
    assert "revoke one you no longer use" in response.content.decode()
    assert AuthToken.objects.filter(user=researcher).count() == 2


def test_wrong_tokens_are_throttled_and_then_even_a_right_one_waits(researcher):
    _, token = api_token_create(user=researcher, days=7)
    for _ in range(10):  # "10/min", the default rate of api_token_failures
        assert _api("0" * 64).status_code == 401
    blocked = _api(token)
    assert blocked.status_code == 429
    assert int(blocked["Retry-After"]) > 0
    assert "failed API token attempts" in blocked.json()["detail"]


def test_session_requests_are_not_throttled_by_token_failures(client, researcher):
    for _ in range(12):
        _api("0" * 64)
    client.force_login(researcher)
    assert client.get("/api/studies/").status_code == 200


def test_a_forged_forwarded_for_header_does_not_reset_the_token_throttle(researcher):
    # No trusted proxy is configured (NUM_PROXIES=0): the address is REMOTE_ADDR, whatever
    # X-Forwarded-For a client sends.
    for i in range(10):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {'0' * 64}")
        assert client.get("/api/studies/", HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code == 401
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {'0' * 64}")
    assert client.get("/api/studies/", HTTP_X_FORWARDED_FOR="198.51.100.7").status_code == 429


def test_upgrading_drops_the_old_table_of_raw_tokens(db):
    from django.core.management import call_command

    with connection.cursor() as cursor:
        # What DRF's authtoken left in a database migrated by an earlier version.
        cursor.execute("CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, user_id int)")
        cursor.execute("INSERT INTO authtoken_token VALUES ('0123456789abcdef', 1)")
    call_command("migrate", "accounts", "zero", verbosity=0)
    call_command("migrate", "accounts", verbosity=0)
    assert "authtoken_token" not in connection.introspection.table_names()


def test_a_token_is_named_and_listed_by_its_name(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("accounts:tokens"), {"days": 30, "name": "  CI export  "})
    assert response.status_code == 200
    assert "Your new token: CI export" in response.content.decode()
    (stored,) = AuthToken.objects.filter(user=researcher)
    assert stored.token_name.name == "CI export"
    _create(client)  # and one with no name
    rows = client.get(reverse("accounts:tokens")).content.decode().split('id="tokens"')[1]
    assert "<td>CI export</td>" in rows and "<td>(no name)</td>" in rows


def test_a_token_name_longer_than_64_characters_is_refused(client, researcher):
    client.force_login(researcher)
    response = client.post(reverse("accounts:tokens"), {"days": 30, "name": "x" * 65})
    assert response.status_code == 422
    assert not AuthToken.objects.exists()
    with pytest.raises(TokenError, match="at most 64 characters"):
        api_token_create(user=researcher, days=7, name="y" * 65)


def test_revoking_asks_first_without_a_script_and_takes_the_name_with_it(client, researcher):
    from accounts.models import TokenName

    client.force_login(researcher)
    stored, _ = api_token_create(user=researcher, days=7, name="old laptop")
    page = client.get(reverse("accounts:tokens")).content.decode()
    # The revoking button sits behind a disclosure: a first click asks, only a second posts.
    confirm = page.split('<details class="confirm">')[1].split("</details>")[0]
    assert "<summary>Revoke…" in confirm and "stop working at once" in confirm
    assert f'action="{reverse("accounts:token_revoke", args=[stored.digest])}"' in confirm
    assert "Yes, revoke “old laptop”" in confirm
    client.post(reverse("accounts:token_revoke", args=[stored.digest]))
    assert not AuthToken.objects.exists() and not TokenName.objects.exists()
