"""The second factor has no side doors: over real HTTP, with real sessions, a session that did
not pass an account's authenticator cannot read, change or remove it, re-authentication of such
an account takes the factor, recovery codes are shown once and TOTP codes work once."""

from __future__ import annotations

import html
import re
import time

import pytest
import requests
from allauth.mfa.models import Authenticator
from django.contrib.auth import get_user_model

from accounts.roles import CLINICIAN, role_add
from tests.live_session import LiveSession, path_of
from tests.second_factor import totp_code, totp_enrol

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-Long-pass-9871-admin"
STEP = 30  # seconds of one TOTP code


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user("boss", password=PASSWORD, is_staff=True)


@pytest.fixture
def web(live_server):
    """A function making a new browser session (each with its own cookies)."""
    return lambda: LiveSession(live_server.url)


def enrol_through_the_pages(session: LiveSession) -> tuple[str, list[str]]:
    """What the owner does at the first sign-in: password once more, scan the secret, type a
    code, read the recovery codes. The secret and the codes."""
    activate = "/accounts/2fa/totp/activate/"
    asked = session.get(activate)
    if path_of(asked).startswith("/accounts/reauthenticate/"):
        assert session.post(path_of(asked), {"password": PASSWORD}).status_code == 302
    page = session.get(activate)
    assert page.status_code == 200, page.text[:300]
    secret = re.search(r'id="authenticator_secret"\s+value="([A-Z2-7]+)"', page.text).group(1)
    # The previous period's code (within the tolerance): the next two periods' codes stay for
    # the sign-ins and re-authentications a test makes in the same minute.
    done = session.post(activate, {"code": totp_code(secret, at=time.time() - STEP)})
    assert done.status_code == 302 and path_of(done) == "/accounts/2fa/recovery-codes/"
    return secret, recovery_codes_shown(session)


def recovery_codes_shown(session: LiveSession) -> list[str]:
    page = session.get("/accounts/2fa/recovery-codes/")
    found = re.search(r'<textarea[^>]*id="recovery_codes"[^>]*>(.*?)</textarea>', page.text, re.S)
    return html.unescape(found.group(1)).split() if found else []


def test_a_session_from_before_enrolment_cannot_read_the_recovery_codes(web, staff):
    """The attack: a password-only session made before the owner enrolled re-enters the
    password, reads the recovery codes and signs in elsewhere with the password and one of
    them, into /manage/, /admin/ and the API tokens. Such a session is signed out at its next
    request, whatever the path."""
    early = web()
    early.sign_in("boss", PASSWORD)
    assert path_of(early.get("/")) == "/accounts/2fa/totp/activate/"
    owner = web()
    owner.sign_in("boss", PASSWORD)
    _, codes = enrol_through_the_pages(owner)
    assert len(codes) == 10

    reauth = early.post("/accounts/reauthenticate/", {"password": PASSWORD})
    read = recovery_codes_shown(early)
    # A fresh sign-in with the password and a code the early session read, if it read any:
    # it read none, and the password alone opens nothing.
    thief = web()
    thief.sign_in("boss", PASSWORD, code=read[0] if read else None)
    for page in ("/manage/", "/admin/", "/accounts/tokens/"):
        assert thief.get(page).status_code != 200, page
    assert read == []
    assert path_of(reauth).startswith("/accounts/login/")
    assert not early.signed_in()
    assert not thief.signed_in()


def test_a_session_from_before_enrolment_cannot_remove_the_owners_authenticator(web, staff):
    """The attack's other end: the password-only session made before the owner enrolled
    re-enters the password and deactivates the owner's TOTP, through the pages a browser
    uses. The authenticator stays and that session is signed out."""
    early = web()
    early.sign_in("boss", PASSWORD)
    owner = web()
    owner.sign_in("boss", PASSWORD)
    enrol_through_the_pages(owner)

    early.post("/accounts/reauthenticate/", {"password": PASSWORD})
    early.post("/accounts/2fa/totp/deactivate/")
    assert Authenticator.objects.filter(user=staff, type="totp").exists()
    assert not early.signed_in()
    assert owner.get("/manage/").status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/accounts/2fa/"),
        ("get", "/accounts/2fa/recovery-codes/"),
        ("get", "/accounts/2fa/recovery-codes/download/"),
        ("post", "/accounts/2fa/recovery-codes/generate/"),
        ("post", "/accounts/2fa/totp/deactivate/"),
        ("get", "/accounts/reauthenticate/"),
        ("post", "/accounts/reauthenticate/"),
        ("get", "/accounts/2fa/reauthenticate/"),
        ("get", "/accounts/password/change/"),
        ("get", "/api/studies/"),
        ("get", "/manage/"),
    ],
)
def test_whatever_the_path_a_session_from_before_enrolment_is_signed_out(web, staff, method, path):
    early = web()
    early.sign_in("boss", PASSWORD)
    totp_enrol(staff)  # the owner enrols elsewhere
    data = {"password": PASSWORD} if method == "post" else None
    response = early.post(path, data) if method == "post" else early.get(path)
    assert response.status_code == 302, (path, response.status_code, response.text[:300])
    assert path_of(response).startswith("/accounts/login/")
    assert not early.signed_in()
    assert Authenticator.objects.filter(user=staff, type="totp").exists()


def test_a_clinicians_old_session_is_signed_out_once_they_enrol(web, django_user_model):
    """The rule is the account's authenticator, not its role: a clinician who chose to enrol
    is protected the same way."""
    cleo = django_user_model.objects.create_user("cleo", password=PASSWORD)
    role_add(user=cleo, role=CLINICIAN)
    early = web()
    assert early.sign_in("cleo", PASSWORD) == "/"
    assert early.get("/rate/").status_code == 200
    owner = web()
    owner.sign_in("cleo", PASSWORD)
    enrol_through_the_pages(owner)
    assert path_of(early.get("/rate/")).startswith("/accounts/login/")
    assert not early.signed_in()
    assert owner.get("/rate/").status_code == 200  # the session that enrolled used the factor


def test_a_session_that_used_a_removed_authenticator_is_signed_out(web, staff):
    """A superuser deletes a lost authenticator and the owner enrols a new one: sessions that
    passed the old one did not pass the new one."""
    secret_before = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXQ"
    totp_enrol(staff, secret_before)
    old = web()
    assert old.sign_in("boss", PASSWORD, code=totp_code(secret_before)) == "/"
    assert old.get("/manage/").status_code == 200
    Authenticator.objects.filter(user=staff).delete()
    time.sleep(0.01)
    totp_enrol(staff)
    assert path_of(old.get("/manage/")).startswith("/accounts/login/")
    assert not old.signed_in()


def test_re_authentication_of_an_enrolled_account_takes_the_factor_not_the_password(web, staff):
    owner = web()
    owner.sign_in("boss", PASSWORD)
    secret, codes = enrol_through_the_pages(owner)
    owner.post("/accounts/logout/")
    session = web()
    assert session.sign_in("boss", PASSWORD, code=totp_code(secret)) == "/"
    # The password form sends the account to the code form and records nothing.
    password = session.post("/accounts/reauthenticate/", {"password": PASSWORD})
    assert password.status_code == 302
    assert path_of(password).startswith("/accounts/2fa/reauthenticate/")
    generate = session.get("/accounts/2fa/recovery-codes/generate/")
    assert path_of(generate).startswith("/accounts/2fa/reauthenticate/")
    # The code re-authenticates.
    code = totp_code(secret, at=time.time() + STEP)
    assert session.post("/accounts/2fa/reauthenticate/", {"code": code}).status_code == 302
    assert session.get("/accounts/2fa/recovery-codes/generate/").status_code == 200


def test_recovery_codes_are_shown_once(web, staff):
    """Shown right after they are made; a later visit, even re-authenticated, shows none of
    them; new codes come from generating new ones, shown once again."""
    owner = web()
    owner.sign_in("boss", PASSWORD)
    secret, codes = enrol_through_the_pages(owner)
    assert len(codes) == 10
    assert recovery_codes_shown(owner) == []
    owner.post("/accounts/logout/")
    session = web()
    session.sign_in("boss", PASSWORD, code=totp_code(secret))
    session.post(
        "/accounts/2fa/reauthenticate/", {"code": totp_code(secret, at=time.time() + STEP)}
    )
    page = session.get("/accounts/2fa/recovery-codes/")
    assert page.status_code == 200
    assert not any(code in page.text for code in codes)
    assert session.get("/accounts/2fa/recovery-codes/download/").status_code in (403, 404)
    regenerated = session.post("/accounts/2fa/recovery-codes/generate/")
    assert path_of(regenerated) == "/accounts/2fa/recovery-codes/"
    fresh = recovery_codes_shown(session)
    assert len(fresh) == 10 and not set(fresh) & set(codes)
    assert recovery_codes_shown(session) == []


def test_the_code_typed_at_enrolment_does_not_sign_in_again(web, staff):
    """A TOTP code works once within its window: the one given to enrol (seen by whoever
    watched it typed) is refused at the next sign-in; the next period's code works."""
    owner = web()
    owner.sign_in("boss", PASSWORD)
    page = owner.get("/accounts/2fa/totp/activate/")
    if path_of(page).startswith("/accounts/reauthenticate/"):
        owner.post(path_of(page), {"password": PASSWORD})
        page = owner.get("/accounts/2fa/totp/activate/")
    secret = re.search(r'id="authenticator_secret"\s+value="([A-Z2-7]+)"', page.text).group(1)
    now = time.time()
    code = totp_code(secret, at=now)
    assert owner.post("/accounts/2fa/totp/activate/", {"code": code}).status_code == 302
    owner.post("/accounts/logout/")

    replay = web()
    replay.sign_in("boss", PASSWORD, code=code)
    assert not replay.signed_in()
    fresh = web()
    assert fresh.sign_in("boss", PASSWORD, code=totp_code(secret, at=now + STEP)) == "/"
    assert fresh.signed_in()


def test_a_sign_in_code_works_once(web, staff):
    totp_enrol(staff)
    code = totp_code(at=time.time() + STEP)
    first = web()
    assert first.sign_in("boss", PASSWORD, code=code) == "/"
    second = web()
    second.sign_in("boss", PASSWORD, code=code)
    assert not second.signed_in()
    # Nor is an earlier period's code taken once a later one was used.
    third = web()
    third.sign_in("boss", PASSWORD, code=totp_code(at=time.time()))
    assert not third.signed_in()


# --- API tokens: the same rule as sessions --------------------------------------------------


def api_get(live_server, path: str, token: str):
    return requests.get(
        live_server.url + path, headers={"Authorization": f"Token {token}"}, timeout=30
    )


def test_a_token_made_before_the_rule_reads_nothing_until_the_account_enrols(live_server, staff):
    """Staff must use a second factor; a token made for a staff account that has none (before
    the rule, or in Django's admin) read clinicians' real names through ?identified=1."""
    from knox.models import AuthToken

    from tests.factories import study_make

    study = study_make()
    _, token = AuthToken.objects.create(user=staff)
    for path in ("/api/ratings/?identified=1", f"/api/studies/{study.pk}/export/?identified=1"):
        refused = api_get(live_server, path, token)
        assert refused.status_code == 403, (path, refused.status_code, refused.text[:300])
        assert "second factor" in refused.json()["detail"]
    totp_enrol(staff)
    assert api_get(live_server, "/api/ratings/?identified=1", token).status_code == 200


def test_a_privileged_account_gets_a_token_only_with_an_authenticator(web, staff):
    from knox.models import AuthToken

    from accounts.services import TokenError, api_token_create

    with pytest.raises(TokenError, match="second factor"):
        api_token_create(user=staff, days=7)
    assert not AuthToken.objects.exists()
    totp_enrol(staff)
    session = web()
    session.sign_in("boss", PASSWORD, code=totp_code())
    page = session.get("/accounts/tokens/")
    assert page.status_code == 200
    assert "only while the account has its authenticator" in page.text
    created = session.post("/accounts/tokens/", {"days": 7})
    token = re.search(r'id="token-value">([0-9a-f]+)<', created.text).group(1)
    assert requests.get(
        session.url("/api/studies/"), headers={"Authorization": f"Token {token}"}, timeout=30
    ).ok
