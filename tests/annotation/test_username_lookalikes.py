"""An invite never makes an account whose name reads as another's: names are NFKC-normalised
(full-width letters, ligatures) and a name whose Unicode skeleton (UTS #39: Cyrillic 'а' for
Latin 'a', 'I' and '1' for 'l', …) is another account's is refused. Over real HTTP, as an admin
invites from /manage/."""

from __future__ import annotations

import html

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from accounts.usernames import username_skeleton
from accounts.users import username_clean
from tests.factories import user_make
from tests.live_session import LiveSession
from tests.second_factor import totp_code, totp_enrol

PASSWORD = "pw-Boss-9876-invites"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("existing", "typed", "said"),
    [
        ("admin", "\u0430dmin", "reads like the existing username 'admin'"),  # Cyrillic а
        ("admin2", "\uff41dmin2", "is taken"),  # full-width ａ: NFKC makes it admin2
        ("staff", "sta\ufb00", "is taken"),  # the ff ligature: NFKC makes it staff
        ("clinician1", "clinicianl", "reads like the existing username 'clinician1'"),
        ("dr.smith", "dr.sm\u0456th", "reads like the existing username 'dr.smith'"),  # Cyrillic і
    ],
)
def test_an_invite_refuses_a_look_alike_of_an_existing_name(live_server, existing, typed, said):
    user_make(username=existing)
    boss = user_make(username="boss", password=PASSWORD, is_staff=True, is_superuser=True)
    totp_enrol(boss)
    admin = LiveSession(live_server.url)
    assert admin.sign_in("boss", PASSWORD, code=totp_code()) == "/"
    before = get_user_model().objects.count()
    response = admin.post(reverse("annotation:manage_invite"), {"username": typed})
    assert response.status_code == 422, response.text[:300]
    assert said in html.unescape(response.text)
    assert get_user_model().objects.count() == before


@pytest.mark.django_db(transaction=True)
def test_an_invite_stores_the_nfkc_form(live_server):
    boss = user_make(username="boss", password=PASSWORD, is_staff=True, is_superuser=True)
    totp_enrol(boss)
    admin = LiveSession(live_server.url)
    admin.sign_in("boss", PASSWORD, code=totp_code())
    response = admin.post(reverse("annotation:manage_invite"), {"username": "\uff44ora"})
    assert response.status_code == 302, response.text[:300]
    assert get_user_model().objects.filter(username="dora").exists()


def test_skeletons_of_look_alikes_are_equal_and_of_different_names_not():
    assert username_skeleton("\u0430dmin") == username_skeleton("admin")
    assert username_skeleton("paypa1") == username_skeleton("paypal")
    assert username_skeleton("rn.lee") == username_skeleton("m.lee")
    assert username_skeleton("dora") != username_skeleton("nora")
    assert username_skeleton("c0") != username_skeleton("c1")


@pytest.mark.django_db
def test_renaming_keeps_its_own_name_and_ordinary_names_pass():
    kept = user_make(username="admin")
    assert username_clean(username="admin", renaming=kept.pk) == "admin"
    assert username_clean(username="dr.Lee-2") == "dr.Lee-2"
    assert username_clean(username="Zoë") == "Zoë"
