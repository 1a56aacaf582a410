"""Deployment safety: the secret key fails closed, `check --deploy` is clean in production, and
every dynamic response carries the Content-Security-Policy and `Cache-Control: no-store`."""

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

ROOT = Path(__file__).resolve().parents[1]

# What docs/security.md tells a hospital's admin to set for production.
PRODUCTION_ENV = {
    "DEBUG": "0",
    "HTTPS": "1",
    "ALLOWED_HOSTS": "mentalbench.hospital.example",
    "CSRF_TRUSTED_ORIGINS": "https://mentalbench.hospital.example",
}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "HTTPS"}}
    # Never pick up a developer's .secret_key from bin/up: each case names its own key source.
    base["SECRET_KEY_FILE"] = str(ROOT / "no-such-secret-key-file")
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"DEBUG": "0"}, "SECRET_KEY is not set"),
        ({"DEBUG": "0", "SECRET_KEY": settings.DEV_SECRET_KEY}, "the public development key"),
        (
            {"DEBUG": "0", "SECRET_KEY": " " + settings.DEV_SECRET_KEY + "\n"},
            "the public development key",
        ),
        ({"DEBUG": "0", "SECRET_KEY": "x"}, "1 characters long, fewer than 50"),
        ({"DEBUG": "0", "SECRET_KEY": "   "}, "SECRET_KEY is not set"),
        ({"DEBUG": "0", "SECRET_KEY": "ab" * 30}, "made of 2 distinct characters"),
        ({"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(60)[:49]}, "49 characters long"),
        ({"DEBUG": "0", "SECRET_KEY": "abcde" * 10}, "made of repeats and runs (about 7 bits"),
        ({"DEBUG": "0", "SECRET_KEY": "0123456789" * 5}, "made of repeats and runs"),
        ({"DEBUG": "0", "SECRET_KEY": "abcdefghijklmnopqrstuvwxyz" * 2}, "repeats and runs"),
    ],
    ids=[
        "missing",
        "development key",
        "padded development key",
        "x",
        "blank",
        "repetitive",
        "49 characters",
        "a block of 5 repeated",
        "digits repeated",
        "the alphabet twice",
    ],  # fmt: skip
)
def test_start_up_refuses_a_missing_or_public_secret_key(env, said):
    result = manage("check", env=env)
    assert result.returncode == 1
    # One line for the operator, no traceback.
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert said in result.stderr
    assert "Traceback" not in result.stderr


# Keys are drawn inside the test: random parameters would give each xdist
# worker different test ids, and xdist refuses to run a collection that differs.
@pytest.mark.parametrize(
    "make_key",
    [
        lambda: secrets.token_urlsafe(50),
        lambda: secrets.token_hex(25),  # the fewest bits a random key of 50 characters has here
        lambda: "test-" + secrets.token_hex(32),  # bin/test's
        lambda: "collectstatic-only-not-a-real-key-0123456789abcdefghijklmnop",  # the Dockerfile's
    ],
    ids=["token_urlsafe(50)", "token_hex(25)", "bin/test's", "the Dockerfile's"],
)
def test_random_keys_pass_the_randomness_floor(make_key):
    from mentalbench.settings import SECRET_KEY_MIN_BITS, secret_key_bits

    for _ in range(20):
        assert secret_key_bits(make_key()) >= SECRET_KEY_MIN_BITS


def test_the_secret_key_is_never_printed():
    result = manage("check", env={"DEBUG": "0", "SECRET_KEY": "short-but-secret-value"})
    assert result.returncode == 1 and "short-but-secret-value" not in result.stderr


def test_the_development_key_is_refused_from_a_file_too(tmp_path):
    key_file = tmp_path / "secret"
    key_file.write_text("  " + settings.DEV_SECRET_KEY + "\n")
    result = manage("check", env={"DEBUG": "0", "SECRET_KEY_FILE": str(key_file)})
    assert result.returncode == 1 and "the public development key" in result.stderr


@pytest.mark.slow  # a `manage.py check` that loads the whole project
def test_secret_key_from_a_file(tmp_path):
    key_file = tmp_path / "secret"
    key_file.write_text(secrets.token_urlsafe(50) + "\n")
    result = manage("check", env={"DEBUG": "0", "SECRET_KEY_FILE": str(key_file)})
    assert result.returncode == 0, result.stderr


@pytest.mark.slow  # a `manage.py check` that loads the whole project
def test_development_may_run_on_the_development_key():
    assert manage("check", env={"DEBUG": "1"}).returncode == 0


@pytest.mark.slow  # a `manage.py check` that loads the whole project
def test_check_deploy_is_clean_with_the_documented_production_environment():
    env = {**PRODUCTION_ENV, "SECRET_KEY": secrets.token_urlsafe(50)}
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.slow  # a `manage.py check` that loads the whole project
def test_check_deploy_is_clean_with_e_mail_and_single_sign_on_configured():
    env = {
        **PRODUCTION_ENV,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "EMAIL_HOST": "smtp.hospital.example",
        "EMAIL_HOST_USER": "mentalbench",
        "EMAIL_HOST_PASSWORD": "smtp-password",
        "DEFAULT_FROM_EMAIL": "mentalbench@hospital.example",
        "SSO_OIDC_SERVER_URL": "https://login.hospital.example/realms/staff",
        "SSO_OIDC_CLIENT_ID": "mentalbench",
        "SSO_OIDC_CLIENT_SECRET": "oidc-client-secret",
        "SESSION_IDLE_HOURS": "4",
    }
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_single_sign_on_without_a_client_id_stops_start_up():
    env = {**PRODUCTION_ENV, "SECRET_KEY": secrets.token_urlsafe(50)}
    env["SSO_OIDC_SERVER_URL"] = "https://login.hospital.example"
    result = manage("check", env=env)
    assert result.returncode != 0 and "SSO_OIDC_CLIENT_ID" in result.stderr


def test_single_sign_on_over_plain_http_stops_start_up():
    env = {**PRODUCTION_ENV, "SECRET_KEY": secrets.token_urlsafe(50)}
    env |= {"SSO_OIDC_SERVER_URL": "http://login.hospital.example", "SSO_OIDC_CLIENT_ID": "mb"}
    result = manage("check", env=env)
    assert result.returncode != 0 and "must start with https://" in result.stderr


SITE_URL_PROBE = (
    "import django; django.setup(); from django.conf import settings; print(settings.SITE_URL)"
)


@pytest.mark.parametrize(
    ("env", "site_url"),
    [
        ({}, "https://mentalbench.hospital.example"),
        ({"SITE_URL": "https://mentalbench.hospital.example:8443/"}, "https://mentalbench.hospital.example:8443"),
        ({"HTTPS": "0", "ALLOWED_HOSTS": "ward.example,localhost"}, "http://ward.example"),
    ],
    ids=["from ALLOWED_HOSTS", "set", "without HTTPS"],
)  # fmt: skip
def test_links_in_e_mails_point_at_the_site_url(env, site_url):
    result = subprocess.run(
        [sys.executable, "-c", SITE_URL_PROBE],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "mentalbench.settings",
            **PRODUCTION_ENV,
            "SECRET_KEY": secrets.token_urlsafe(50),
            "SITE_URL": "",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == site_url


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("mentalbench.hospital.example", "is not a site address"),
        ("https://mentalbench.hospital.example/mb", "is not a site address"),
        ("https://mentalbench.hospital.example:port", "is not a site address"),
        ("http://mentalbench.hospital.example", "must start with https:// when HTTPS=1"),
    ],
)
def test_a_site_url_that_is_not_one_stops_start_up(value, said):
    env = {**PRODUCTION_ENV, "SECRET_KEY": secrets.token_urlsafe(50), "SITE_URL": value}
    result = manage("check", env=env)
    assert result.returncode != 0 and said in result.stderr


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("JUDGING_LEASE_SECONDS", "soon", "JUDGING_LEASE_SECONDS='soon' is not a number"),
        ("JUDGING_DB_OUTAGE_SECONDS", "nan", "JUDGING_DB_OUTAGE_SECONDS=nan must be positive"),
        ("JUDGING_BATCH_STORE_CHUNK", "0", "JUDGING_BATCH_STORE_CHUNK=0 must be positive"),
    ],
)
def test_a_bad_run_setting_stops_start_up(variable, value, said):
    env = {"DEBUG": "0", "SECRET_KEY": secrets.token_urlsafe(50), variable: value}
    result = manage("check", env=env)
    assert result.returncode != 0 and said in result.stderr


@pytest.mark.slow  # a `manage.py check` that loads the whole project
def test_check_deploy_warns_without_https():
    # The same check is not vacuous: without HTTPS=1 it names what is missing.
    env = {**PRODUCTION_ENV, "HTTPS": "0", "SECRET_KEY": secrets.token_urlsafe(50)}
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode != 0
    assert "SESSION_COOKIE_SECURE" in result.stdout + result.stderr


@pytest.mark.django_db
def test_pages_carry_a_strict_content_security_policy(client, django_user_model):
    user = django_user_model.objects.create_user("someone", password="a long enough password 1")
    client.force_login(user)
    policy = client.get(reverse("home"))["Content-Security-Policy"]
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'"  # no inline code, no eval
    assert directives["object-src"] == "'none'"
    assert directives["frame-ancestors"] == "'none'"


@pytest.mark.django_db
def test_dynamic_responses_are_never_stored(client):
    for response in (client.get(reverse("account_login")), client.get(reverse("healthz"))):
        assert "no-store" in response["Cache-Control"]


def test_no_template_holds_inline_script_or_handlers():
    # The policy refuses them in the browser; catching them here names the file.
    offenders = []
    for path in (ROOT / "templates").rglob("*.html"):
        text = path.read_text()
        for bad in ("<script>", " onclick=", " onchange=", " onsubmit=", " oninput=", "<style>"):
            if bad in text:
                offenders.append(f"{path.relative_to(ROOT)}: {bad.strip()}")
    assert not offenders


def test_no_template_has_an_empty_table_header():
    # A column of buttons or links still needs a header a screen reader can read out (a hidden
    # one does): axe's td-has-header, experimental and so outside the browser walk's default
    # rules, fails such a table as critical.
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in (ROOT / "templates").rglob("*.html")
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if re.search(r"<th(\s[^>]*)?>\s*</th>", line)
    ]
    assert not offenders, f"empty <th> (give it a class=sr-only label): {offenders}"
