"""Single sign-on against a small fake OpenID Connect provider (tests/fakes/oidc_provider.py):
discovery, authorization code with PKCE, an ID token signed with the provider's key. An SSO
account starts with no role."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlparse

import pytest
import requests
from django.contrib.auth import get_user_model
from django.urls import reverse

from accounts.models import SignInEvent
from tests.fakes.oidc_provider import FakeOIDCProvider


@pytest.fixture
def provider(db, settings) -> Iterator[FakeOIDCProvider]:
    with FakeOIDCProvider() as fake:
        settings.SSO_OIDC_SERVER_URL = fake.url
        settings.SOCIALACCOUNT_PROVIDERS = fake.settings()
        yield fake


def sso_sign_in(client, provider: FakeOIDCProvider):
    """The browser's round trip: our start URL, the provider's authorize URL, our callback."""
    start = client.post(reverse("openid_connect_login", kwargs={"provider_id": "hospital"}))
    assert start.status_code == 302 and start["Location"].startswith(provider.url + "/authorize")
    query = parse_qs(urlparse(start["Location"]).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"]
    back = requests.get(start["Location"], allow_redirects=False, timeout=10)
    assert back.status_code == 302
    callback = urlparse(back.headers["Location"])
    return client.get(f"{callback.path}?{callback.query}")


def test_the_sign_in_page_offers_sso_when_configured(client, provider):
    page = client.get(reverse("account_login")).content.decode()
    assert "Sign in with Hospital" in page


def test_sso_signs_in_a_new_account_with_no_role(client, provider):
    response = sso_sign_in(client, provider)
    assert response.status_code == 302, response.content[:500]
    user = get_user_model().objects.get(username="dr.sso")
    assert client.session["_auth_user_id"] == str(user.pk)
    assert not user.is_staff and not user.is_superuser and not user.groups.exists()
    assert not user.has_usable_password()
    # No role until an admin grants one: every role's pages refuse.
    for path in ("/rate/", "/analysis/", "/manage/"):
        assert client.get(path).status_code == 403, path
    # The token request proved the PKCE verifier and the client (the fake checks both).
    (token_request,) = provider.token_requests
    assert token_request["code_verifier"] and token_request["client_id"] == "mentalbench-test"
    event = SignInEvent.objects.get(succeeded=True)
    assert (event.user, event.method) == (user, "sso")


def test_the_same_person_signs_in_to_the_same_account(client, provider):
    sso_sign_in(client, provider)
    client.logout()
    sso_sign_in(client, provider)
    assert get_user_model().objects.filter(email="dr.sso@hospital.example").count() == 1


def test_an_existing_account_with_the_same_address_is_not_taken_over(
    client, provider, django_user_model
):
    boss = django_user_model.objects.create_user(
        "boss", email="dr.sso@hospital.example", password="pw-boss-long-enough", is_staff=True
    )
    sso_sign_in(client, provider)
    assert client.session.get("_auth_user_id") != str(boss.pk)


def test_an_id_token_for_another_client_is_refused(client, provider):
    provider.audience = "some-other-application"
    sso_sign_in(client, provider)
    assert "_auth_user_id" not in client.session
    assert not get_user_model().objects.filter(username="dr.sso").exists()


def test_the_id_token_is_signed_with_the_key_the_provider_publishes(client, provider):
    """allauth checks the signature against the provider's JWKS (it may skip the check for a
    token received straight from the token endpoint over TLS: SSO_OIDC_SERVER_URL must be
    https outside DEBUG). The fake's token verifies with its published key, a forged one not."""
    from allauth.socialaccount.internal.jwtkit import lookup_kid_jwk, verify_and_decode
    from allauth.socialaccount.providers.oauth2.client import OAuth2Error

    sso_sign_in(client, provider)
    common = {
        "keys_url": f"{provider.url}/jwks",
        "issuer": provider.url,
        "audience": "mentalbench-test",
        "lookup_kid": lookup_kid_jwk,
    }
    (genuine,) = provider.issued_id_tokens
    assert verify_and_decode(credential=genuine, **common)["sub"] == "hospital-0042"
    provider.sign_with_unpublished_key = True
    client.logout()
    sso_sign_in(client, provider)
    forged = provider.issued_id_tokens[-1]
    with pytest.raises(OAuth2Error):
        verify_and_decode(credential=forged, **common)


def test_sso_is_off_by_default(client, db):
    assert "Sign in with" not in client.get(reverse("account_login")).content.decode()
    response = client.post("/accounts/oidc/hospital/login/")
    assert response.status_code == 404
