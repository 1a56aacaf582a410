"""The first admin of a deployment comes from the environment, never from a published default."""

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

STRONG = "correct horse battery staple 42"


@pytest.fixture
def admin_env(settings):
    # settings.py reads MENTALBENCH_ADMIN_USERNAME and _PASSWORD from the environment.
    def set_env(username: str = "", password: str = "") -> None:
        settings.MENTALBENCH_ADMIN_USERNAME = username
        settings.MENTALBENCH_ADMIN_PASSWORD = password

    return set_env


@pytest.mark.django_db
def test_creates_the_first_admin_once(admin_env, capsys):
    admin_env("lead", STRONG)
    call_command("create_admin")
    user = get_user_model().objects.get(username="lead")
    assert user.is_superuser and user.is_staff and user.check_password(STRONG)
    assert STRONG not in capsys.readouterr().out  # never echoed

    admin_env("lead", "another long passphrase 99")
    call_command("create_admin")  # idempotent: the password is not reset by a restart
    user.refresh_from_db()
    assert user.check_password(STRONG)


@pytest.mark.django_db
def test_an_admin_named_in_another_case_is_the_same_admin(admin_env, capsys):
    admin_env("Lead", STRONG)
    call_command("create_admin")
    admin_env("lead", STRONG)
    call_command("create_admin")  # no IntegrityError from the case-insensitive unique index
    assert "admin 'lead' (as 'Lead') exists; left as it is" in capsys.readouterr().out
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["Lead"]


@pytest.mark.django_db
def test_nothing_without_configuration(admin_env):
    admin_env()
    call_command("create_admin")
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("password", ["password1", "12345678", "lead"])
def test_weak_password_is_refused(admin_env, password):
    admin_env("lead", password)
    with pytest.raises(CommandError, match="MENTALBENCH_ADMIN_PASSWORD refused"):
        call_command("create_admin")
    assert not get_user_model().objects.exists()


@pytest.mark.django_db
def test_half_configured_is_an_error(admin_env):
    admin_env("lead", "")
    with pytest.raises(CommandError, match="both"):
        call_command("create_admin")


@pytest.mark.django_db
def test_createsuperuser_refuses_a_name_taken_in_another_case(monkeypatch):
    """Django's own command looks for the exact name only; the database index then failed with
    a bare IntegrityError. The platform's createsuperuser refuses it as taken, before writing."""
    get_user_model().objects.create_user("Lead", password=STRONG)
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", STRONG)
    with pytest.raises(CommandError, match=r"already taken \(as 'Lead'\)"):
        call_command("createsuperuser", "--noinput", "--username", "lead", "--email", "")
    assert list(get_user_model().objects.values_list("username", flat=True)) == ["Lead"]


@pytest.mark.django_db
def test_createsuperuser_asks_again_for_a_name_taken_in_another_case(monkeypatch, capsys):
    get_user_model().objects.create_user("Lead", password=STRONG)
    answers = iter(["lead", "second"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    monkeypatch.setattr("getpass.getpass", lambda prompt="": STRONG)

    class Terminal:
        def isatty(self) -> bool:
            return True

    call_command("createsuperuser", "--email", "second@example.org", stdin=Terminal())
    assert "already taken (as 'Lead')" in capsys.readouterr().err
    admin = get_user_model().objects.get(username="second")
    assert admin.is_superuser and admin.check_password(STRONG)


def test_manage_py_runs_the_platform_createsuperuser():
    from django.core.management import get_commands

    assert get_commands()["createsuperuser"] == "accounts"
