"""Linking a single sign-on identity, setting or changing a password, and an SSO sign-in whose
e-mail address a local account already has: over real HTTP against a running server and the
fake OpenID Connect provider (tests/fakes/oidc_provider.py)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import requests
from allauth.account.models import EmailAddress
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model

from accounts.roles import CLINICIAN, role_add
from tests.fakes.oidc_provider import FakeOIDCProvider, Subject
from tests.live_session import LiveSession, path_of
from tests.second_factor import totp_code, totp_enrol

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-Long-pass-9871-cleo"
NEW_PASSWORD = "a-New-pass-5678-cleo"
THIEF = Subject(
    sub="hospital-0666", email="thief@hospital.example", preferred_username="thief", name="T"
)


@pytest.fixture
def provider(settings) -> Iterator[FakeOIDCProvider]:
    with FakeOIDCProvider() as fake:
        settings.SSO_OIDC_SERVER_URL = fake.url
        settings.SOCIALACCOUNT_PROVIDERS = fake.settings()
        yield fake


@pytest.fixture
def web(live_server):
    return lambda: LiveSession(live_server.url)


@pytest.fixture
def cleo(db):
    user = get_user_model().objects.create_user(
        "cleo", email="cleo@ward.example", password=PASSWORD
    )
    role_add(user=user, role=CLINICIAN)
    return user


def sso(session: LiveSession, provider: FakeOIDCProvider, *, process: str = "login"):
    """The browser's round trip: our start URL, the provider's authorize URL, our callback;
    the callback's answer."""
    start = session.post("/accounts/oidc/hospital/login/", {"process": process})
    assert start.status_code == 302, start.text[:300]
    assert start.headers["Location"].startswith(provider.url + "/authorize")
    back = requests.get(start.headers["Location"], allow_redirects=False, timeout=10)
    assert back.status_code == 302
    return session.get(back.headers["Location"])


def signed_in_as(session: LiveSession) -> str | None:
    page = session.get("/accounts/email/")
    if page.status_code != 200:
        return None
    found = re.search(r'class="who"[^>]*>([^<]+)<', page.text)
    return found.group(1).strip() if found else None


def test_a_stolen_session_cannot_link_the_thiefs_identity(web, provider, cleo):
    """With only the victim's cookie, the thief links their own IdP identity; their later SSO
    sign-in lands as the victim. Linking asks for the password (or code) first."""
    stolen = web()
    stolen.sign_in("cleo", PASSWORD)
    provider.subject = THIEF
    answer = sso(stolen, provider, process="connect")
    assert answer.status_code == 302
    assert path_of(answer).startswith("/accounts/reauthenticate/")
    assert not SocialAccount.objects.filter(user=cleo).exists()
    later = web()
    sso(later, provider)
    assert signed_in_as(later) != "cleo"


def test_the_owner_links_after_re_entering_the_password(web, provider, cleo):
    owner = web()
    owner.sign_in("cleo", PASSWORD)
    provider.subject = Subject(sub="hospital-0042", email="cleo@ward.example")
    reauth = path_of(sso(owner, provider, process="connect"))
    assert reauth.startswith("/accounts/reauthenticate/")
    done = owner.post(reauth, {"password": PASSWORD})
    assert done.status_code == 302
    (linked,) = SocialAccount.objects.filter(user=cleo)
    assert linked.uid == "hospital-0042"
    later = web()
    sso(later, provider)
    assert signed_in_as(later) == "cleo"


def test_an_enrolled_account_links_only_after_its_code(web, provider, cleo):
    totp_enrol(cleo)
    owner = web()
    owner.sign_in("cleo", PASSWORD, code=totp_code())
    provider.subject = Subject(sub="hospital-0042", email="cleo@ward.example")
    asked = path_of(sso(owner, provider, process="connect"))
    # allauth asks at its re-authentication page, which sends an enrolled account on to the code
    # and takes no password from it.
    assert asked.startswith("/accounts/reauthenticate/")
    reauth = path_of(owner.get(asked))
    assert reauth.startswith("/accounts/2fa/reauthenticate/")
    assert path_of(owner.post(asked, {"password": PASSWORD})).startswith(
        "/accounts/2fa/reauthenticate/"
    )
    assert not SocialAccount.objects.filter(user=cleo).exists()
    owner.post(reauth, {"code": totp_code(at=time.time() + 30)})
    assert SocialAccount.objects.filter(user=cleo, uid="hospital-0042").exists()


def test_an_sso_only_account_cannot_set_a_password_or_link_another_identity(web, provider):
    """An SSO account has no password and nothing to re-authenticate with here: setting a
    password from a session alone would outlive the person's removal at the identity provider,
    and linking would join a second identity on the strength of a cookie."""
    session = web()
    sso(session, provider)
    user = get_user_model().objects.get(username="dr.sso")
    page = session.get("/accounts/password/set/")
    assert page.status_code == 403
    assert "ask an admin" in page.text
    posted = session.post(
        "/accounts/password/set/", {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD}
    )
    assert posted.status_code == 403
    user.refresh_from_db()
    assert not user.has_usable_password()
    provider.subject = THIEF
    linked = sso(session, provider, process="connect")
    assert linked.status_code == 403
    assert SocialAccount.objects.filter(user=user).count() == 1


def test_changing_the_password_of_an_enrolled_account_takes_its_code(web, cleo):
    totp_enrol(cleo)
    session = web()
    session.sign_in("cleo", PASSWORD, code=totp_code())
    form = {"oldpassword": PASSWORD, "password1": NEW_PASSWORD, "password2": NEW_PASSWORD}
    asked = session.post("/accounts/password/change/", form)
    assert path_of(asked).startswith("/accounts/2fa/reauthenticate/")
    cleo.refresh_from_db()
    assert cleo.check_password(PASSWORD)
    # The code, then the change goes through (allauth resumes the suspended form).
    session.post(path_of(asked), {"code": totp_code(at=time.time() + 30)})
    changed = session.post("/accounts/password/change/", form)
    assert changed.status_code == 302
    cleo.refresh_from_db()
    assert cleo.check_password(NEW_PASSWORD)


@pytest.mark.parametrize(
    ("kind", "address"),
    [
        ("account", "dr.sso@hospital.example"),
        ("account", "DR.SSO@Hospital.Example"),
        ("unverified", "dr.sso@hospital.example"),
        ("verified", "Dr.Sso@HOSPITAL.example"),
    ],
)
def test_sso_with_the_address_of_a_local_account_says_what_to_do(web, provider, kind, address):
    """Never joined by address: allauth sent the same address to its sign-up form, which the
    platform's settings cannot render (a 500), and let another case of it through as a second
    account with the same address. Now a page says to sign in and link, or ask an admin."""
    local = get_user_model().objects.create_user(
        "cleo", email=address if kind == "account" else "", password=PASSWORD
    )
    if kind != "account":
        EmailAddress.objects.create(user=local, email=address, verified=kind == "verified")
    session = web()
    answer = sso(session, provider)
    # Where it leads, one redirect on (allauth went on to its sign-up form, which failed).
    if answer.status_code == 302:
        answer = session.get(path_of(answer))
    assert answer.status_code == 409, (answer.status_code, answer.text[:500])
    assert "already has this e-mail address" in answer.text
    assert "ask an admin" in answer.text and "/accounts/3rdparty/" in answer.text
    assert signed_in_as(session) is None
    assert not get_user_model().objects.filter(username="dr.sso").exists()
    assert not SocialAccount.objects.exists()


def test_a_first_sso_sign_in_gets_no_look_alike_of_an_existing_username(web, provider):
    """The provider's preferred username passes the invites' rule: 'аdmin' (Cyrillic а) beside
    'admin' becomes another name."""
    from accounts.usernames import usernames_look_alike

    get_user_model().objects.create_user("admin", password=PASSWORD)
    provider.subject = Subject(
        sub="hospital-0777", email="a.min@hospital.example", preferred_username="\u0430dmin"
    )
    session = web()
    sso(session, provider)
    (account,) = SocialAccount.objects.filter(uid="hospital-0777")
    assert not usernames_look_alike(account.user.username, "admin"), account.user.username


def test_sso_into_an_enrolled_account_still_asks_for_its_code(web, provider, cleo):
    """Single sign-on is one more way in, not a way around the second factor: an account with
    an authenticator, signing in through the identity provider, gives its code before it is
    signed in, as after a password."""
    totp_enrol(cleo)
    SocialAccount.objects.create(user=cleo, provider="hospital", uid="hospital-0042")
    session = web()
    answer = sso(session, provider)
    assert path_of(answer).startswith("/accounts/2fa/authenticate/"), path_of(answer)
    assert signed_in_as(session) is None
    session.post("/accounts/2fa/authenticate/", {"code": totp_code()})
    assert signed_in_as(session) == "cleo"
