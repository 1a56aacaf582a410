"""Sign-in is locked after repeated wrong passwords; passwords follow Django's full rules."""

import pytest
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse

PASSWORD = "pw-cleo-long-enough"


def _sign_in(client, password: str, username: str = "cleo"):
    return client.post(reverse("account_login"), {"login": username, "password": password})


def test_wrong_passwords_lock_the_account_even_for_the_right_password(client, clinician, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _sign_in(client, "wrong-guess").status_code == 200  # the form again
    assert _sign_in(client, "wrong-guess").status_code == 429  # the last allowed failure locks
    response = _sign_in(client, PASSWORD)
    assert response.status_code == 429
    assert "Sign-in paused" in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_the_lock_holds_for_other_addresses_too(client, clinician, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _sign_in(client, "wrong-guess")
    response = client.post(
        reverse("account_login"),
        {"login": "cleo", "password": PASSWORD},
        REMOTE_ADDR="10.9.8.7",
    )
    assert response.status_code == 429


def test_a_success_before_the_limit_clears_the_count(client, clinician, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _sign_in(client, "wrong-guess")
    assert _sign_in(client, PASSWORD).status_code == 302
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        _sign_in(client, "wrong-guess")
    assert _sign_in(client, PASSWORD).status_code == 302


def test_an_admin_lifts_the_lock_with_a_command(client, clinician, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _sign_in(client, "wrong-guess")
    call_command("axes_reset_username", "cleo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    call_command("axes_reset_ip", "127.0.0.1", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert _sign_in(client, PASSWORD).status_code == 302


def test_a_forged_forwarded_for_header_does_not_dodge_the_address_lock(
    client, django_user_model, settings
):
    # Spraying one guess over many accounts from one address: the address is locked, and a
    # client-supplied X-Forwarded-For (no trusted proxy configured) does not change it.
    for i in range(settings.AXES_FAILURE_LIMIT):
        django_user_model.objects.create_user(f"user{i}", password=PASSWORD)
        client.post(
            reverse("account_login"),
            {"login": f"user{i}", "password": "Summer2026!"},
            HTTP_X_FORWARDED_FOR=f"203.0.113.{i}",
        )
    response = client.post(
        reverse("account_login"),
        {"login": "user0", "password": PASSWORD},
        HTTP_X_FORWARDED_FOR="198.51.100.1",
    )
    assert response.status_code == 429


@pytest.mark.parametrize(
    ("username", "password", "rule"),
    [
        ("dora", "8264917350193", "entirely numeric"),
        ("margaretthatcher", "margaretthatcher1", "too similar to the username"),
        ("dora", "short1", "too short"),
        ("dora", "password123", "too common"),
    ],
)
def test_password_rules_refuse_weak_passwords(django_user_model, username, password, rule):
    user = django_user_model(username=username)
    with pytest.raises(ValidationError, match=rule):
        validate_password(password, user=user)


def test_the_set_password_page_applies_the_rules(client, admin_user, django_user_model):
    import re

    client.force_login(admin_user)
    invite = client.post(reverse("annotation:manage_invite"), {"username": "dora"}, follow=True)
    page = invite.content.decode()
    link = re.search(r'id="password-link">http://testserver([^<]+)<', page).group(1)
    client.logout()
    form = client.get(link, follow=True)
    numeric = "8264917350193"
    response = client.post(
        form.redirect_chain[-1][0], {"new_password1": numeric, "new_password2": numeric}
    )
    assert response.status_code == 200 and "entirely numeric" in response.content.decode()
    assert not django_user_model.objects.get(username="dora").has_usable_password()


@pytest.mark.parametrize(
    "username", ["admin", "clinician1", "clinician2", "clinician3", "researcher", "lead1"]
)
def test_the_demo_password_meets_the_rules(django_user_model, username):
    validate_password("mentalbench-demo", user=django_user_model(username=username))
