"""Endpoint secrets: only allowed environment variables, API keys encrypted at rest, rotation."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test import override_settings
from django.urls import reverse

from annotation.models import Rating
from judging import api_keys, services
from judging.models import ModelEndpoint, Run
from tests.conftest import TEST_ENCRYPTION_KEY
from tests.factories import texts_study_make

from .conftest import API_KEY, ROOT
from .runs import judge, marker

OTHER_KEY = Fernet.generate_key().decode()
SHA = hashlib.sha256(API_KEY.encode()).hexdigest()


def stored_column(endpoint: ModelEndpoint) -> str:
    """What the database itself holds, read past the ORM."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT api_key FROM {ModelEndpoint._meta.db_table} WHERE id = %s", [endpoint.pk]
        )
        return cursor.fetchone()[0]


def raw_update(endpoint: ModelEndpoint, column: str, value: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {ModelEndpoint._meta.db_table} SET {column} = %s WHERE id = %s",
            [value, endpoint.pk],
        )


def judged_once(endpoint: ModelEndpoint) -> tuple[Run, str]:
    """A judge run over one response carrying its own marker; returns (run, marker)."""
    tag = marker("ok")
    study, _ = texts_study_make(texts={"a": tag})
    return judge(study, endpoint), tag


@pytest.fixture
def superuser_client(client, db):
    user = get_user_model().objects.create_superuser("root", password="pw-123456")
    client.force_login(user)
    return client


def endpoint_form(**overrides: str) -> dict[str, str]:
    data = {
        "name": f"typed-{uuid.uuid4().hex[:6]}",
        "provider": "openai",
        "model": "gpt-4o",
        "family": "openai-gpt4o",
        "base_url": "",
        "api_key_env": "",
        "api_key": "",
        "default_params": "{}",
        "json_mode": "on",
        "structured_output": "off",
        "supports_temperature": "on",
        "timeout_s": "60",
        "responder_key": "",
        "price_input_per_mtok": "0",
        "price_output_per_mtok": "0",
        "price_batch_input_per_mtok": "0",
        "price_batch_output_per_mtok": "0",
    }
    data.update(overrides)
    return data


# ----------------------------------------------------------------- allowed variable names


@pytest.mark.parametrize("name", ["MENTALBENCH_KEY_OPENAI", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"])
def test_allowed_key_variables_pass_validation(db, name):
    ModelEndpoint(name="e", provider="openai", model="m", family="f", api_key_env=name).full_clean()


@pytest.mark.parametrize(
    "name", ["DATABASE_URL", "SECRET_KEY", "HOME", "MENTALBENCH_KEY_", "mentalbench_key_x"]
)
def test_other_variables_are_refused_by_model_validation(db, name):
    endpoint = ModelEndpoint(name="e", provider="openai", model="m", family="f", api_key_env=name)
    with pytest.raises(ValidationError) as error:
        endpoint.full_clean()
    message = str(error.value.message_dict["api_key_env"])
    assert name in message and "MENTALBENCH_KEY_" in message


def test_the_operator_chooses_prefix_and_list_but_never_the_platforms_own_secrets(db):
    with override_settings(LLM_KEY_ENV_PREFIX="LAB_", LLM_KEY_ENV_ALLOWED=["GEMINI_KEY"]):
        assert api_keys.key_env_refusal("LAB_OPENAI") is None
        assert api_keys.key_env_refusal("GEMINI_KEY") is None
        assert api_keys.key_env_refusal("OPENAI_API_KEY") is not None
        assert api_keys.key_env_refusal("MENTALBENCH_KEY_X") is not None
    # A prefix that would cover the encryption keys, or a list naming the database URL.
    with override_settings(
        LLM_KEY_ENV_PREFIX="MENTALBENCH_", LLM_KEY_ENV_ALLOWED=["DATABASE_URL", "SECRET_KEY"]
    ):
        for name in ("MENTALBENCH_ENCRYPTION_KEYS", "DATABASE_URL", "SECRET_KEY"):
            assert "platform's own secrets" in api_keys.key_env_refusal(name)
    with override_settings(LLM_KEY_ENV_PREFIX="", LLM_KEY_ENV_ALLOWED=[]):
        assert "no variable is allowed" in api_keys.key_env_refusal("MENTALBENCH_KEY_X")


def test_admin_refuses_a_disallowed_key_variable(superuser_client):
    page = superuser_client.post(
        reverse("admin:judging_modelendpoint_add"), endpoint_form(api_key_env="DATABASE_URL")
    )
    assert page.status_code == 200  # the form again, with the error
    assert "DATABASE_URL holds one of the platform&#x27;s own secrets" in page.content.decode()
    # The empty form says beforehand which names are allowed.
    empty = superuser_client.get(reverse("admin:judging_modelendpoint_add")).content.decode()
    assert "allowed: a name starting with MENTALBENCH_KEY_ or OPENAI_API_KEY" in empty
    assert not ModelEndpoint.objects.exists()


def test_a_disallowed_variable_written_around_validation_is_refused_at_call_time(
    study, endpoint_factory, fake_llm, monkeypatch
):
    # A row written before the rule existed, or by raw SQL, never reaches the validators.
    monkeypatch.setenv("DATABASE_URL", "postgres://owner:db-password-XYZ@db.internal/prod")
    endpoint = endpoint_factory("openai", api_key="")
    raw_update(endpoint, "api_key_env", "DATABASE_URL")
    endpoint.refresh_from_db()
    run, tag = judged_once(endpoint)
    assert run.status == Run.Status.FAILED
    assert "api_key_env refused: DATABASE_URL holds one of the platform's own secrets" in run.error
    assert "db-password-XYZ" not in run.error
    assert fake_llm.requests_for(tag) == []  # nothing was sent anywhere
    # A stored key does not make a disallowed variable acceptable either.
    endpoint.api_key = API_KEY
    endpoint.save()
    with pytest.raises(Exception, match="DATABASE_URL holds one of") as error:
        services.endpoint_config(endpoint=endpoint)
    assert "db-password-XYZ" not in str(error.value)


def test_an_allowed_variable_is_sent_over_http(study, endpoint_factory, fake_llm, monkeypatch):
    monkeypatch.setenv("MENTALBENCH_KEY_FAKE", API_KEY)
    endpoint = endpoint_factory("anthropic", api_key="", api_key_env="MENTALBENCH_KEY_FAKE")
    run, tag = judged_once(endpoint)
    assert run.status == Run.Status.DONE
    assert [r.key_sha256 for r in fake_llm.requests_for(tag)] == [SHA]


# ----------------------------------------------------------------- encryption at rest


def test_the_column_holds_no_plaintext_whichever_way_the_key_is_written(db, endpoint_factory):
    endpoint = endpoint_factory("openai")  # ModelEndpoint.objects.create(api_key=API_KEY)
    first = stored_column(endpoint)
    assert first.startswith("fernet:") and API_KEY not in first and API_KEY[:10] not in first
    # The instance holds what the column holds, never the plaintext it was given.
    assert endpoint.api_key == first
    ModelEndpoint.objects.filter(pk=endpoint.pk).update(api_key=API_KEY + "-2")
    second = stored_column(endpoint)
    assert second.startswith("fernet:") and API_KEY not in second
    assert api_keys.api_key_decrypt(stored=second) == API_KEY + "-2"


def test_the_decrypted_key_is_sent_over_http(study, endpoint_factory, fake_llm):
    for provider in ("openai", "anthropic"):
        endpoint = endpoint_factory(provider)
        run, tag = judged_once(endpoint)
        assert run.status == Run.Status.DONE
        assert Rating.objects.filter(run=run).count() == 1
        assert [r.key_sha256 for r in fake_llm.requests_for(tag)] == [SHA]


def test_admin_stores_a_typed_key_encrypted_and_keeps_it_when_left_blank(
    superuser_client, fake_llm
):
    url = reverse("admin:judging_modelendpoint_add")
    answer = superuser_client.post(url, endpoint_form(name="typed", api_key=API_KEY))
    assert answer.status_code == 302
    endpoint = ModelEndpoint.objects.get(name="typed")
    stored = stored_column(endpoint)
    assert stored.startswith("fernet:") and API_KEY not in stored
    change = reverse("admin:judging_modelendpoint_change", args=[endpoint.pk])
    page = superuser_client.get(change).content.decode()
    assert API_KEY not in page and stored not in page  # neither key nor ciphertext shown
    answer = superuser_client.post(change, endpoint_form(name="typed", model="gpt-4o-mini"))
    assert answer.status_code == 302
    assert stored_column(endpoint) == stored
    endpoint.refresh_from_db()
    assert api_keys.endpoint_api_key(endpoint=endpoint) == API_KEY


def test_without_an_encryption_key_a_typed_key_is_refused_and_env_references_still_work(
    superuser_client, settings, monkeypatch
):
    settings.MENTALBENCH_ENCRYPTION_KEYS = []
    url = reverse("admin:judging_modelendpoint_add")
    page = superuser_client.post(url, endpoint_form(name="nokey", api_key=API_KEY))
    assert page.status_code == 200
    assert "MENTALBENCH_ENCRYPTION_KEYS is not set" in page.content.decode()
    assert not ModelEndpoint.objects.exists()
    # Around the form the field refuses too: plaintext never reaches the column.
    with (
        pytest.raises(api_keys.ApiKeyError, match="MENTALBENCH_ENCRYPTION_KEYS is not set"),
        transaction.atomic(),
    ):
        ModelEndpoint.objects.create(
            name="raw", provider="openai", model="m", family="f", api_key=API_KEY
        )
    assert not ModelEndpoint.objects.exists()
    answer = superuser_client.post(
        url, endpoint_form(name="env", api_key_env="MENTALBENCH_KEY_OPENAI")
    )
    assert answer.status_code == 302
    monkeypatch.setenv("MENTALBENCH_KEY_OPENAI", API_KEY)
    endpoint = ModelEndpoint.objects.get(name="env")
    assert api_keys.endpoint_api_key(endpoint=endpoint) == API_KEY


def test_a_key_typed_to_look_encrypted_is_refused(superuser_client):
    page = superuser_client.post(
        reverse("admin:judging_modelendpoint_add"), endpoint_form(api_key="fernet:abc")
    )
    assert "cannot start with" in page.content.decode()
    assert not ModelEndpoint.objects.exists()


def test_a_wrong_encryption_key_stops_the_run_with_a_clear_error(
    study, endpoint_factory, fake_llm, settings
):
    endpoint = endpoint_factory("openai")
    settings.MENTALBENCH_ENCRYPTION_KEYS = [OTHER_KEY]
    run, tag = judged_once(endpoint)
    assert run.status == Run.Status.FAILED
    assert endpoint.name in run.error
    assert "cannot be decrypted with any key in MENTALBENCH_ENCRYPTION_KEYS" in run.error
    assert fake_llm.requests_for(tag) == []
    # Re-encrypting with keys that cannot open it writes nothing.
    before = stored_column(endpoint)
    with pytest.raises(CommandError, match=f"nothing re-encrypted.*{endpoint.name}"):
        call_command("reencrypt_api_keys")
    assert stored_column(endpoint) == before


def test_a_plaintext_key_written_by_raw_sql_is_refused_then_encrypted_by_the_command(
    db, endpoint_factory, capsys
):
    endpoint = endpoint_factory("openai")
    raw_update(endpoint, "api_key", API_KEY)
    endpoint.refresh_from_db()
    with pytest.raises(Exception, match="not encrypted.*reencrypt_api_keys") as error:
        services.endpoint_config(endpoint=endpoint)
    assert API_KEY not in str(error.value)
    call_command("reencrypt_api_keys")
    assert "re-encrypted 1 stored API key" in capsys.readouterr().out
    assert stored_column(endpoint).startswith("fernet:")
    endpoint.refresh_from_db()
    assert services.endpoint_config(endpoint=endpoint).api_key == API_KEY


def test_key_rotation(study, endpoint_factory, fake_llm, settings):
    endpoint = endpoint_factory("openai")
    old_token = stored_column(endpoint)
    # 1. The new key goes first; the old one stays and still decrypts.
    settings.MENTALBENCH_ENCRYPTION_KEYS = [OTHER_KEY, TEST_ENCRYPTION_KEY]
    endpoint.refresh_from_db()
    assert services.endpoint_config(endpoint=endpoint).api_key == API_KEY
    # 2. Re-encrypt everything with the new key.
    call_command("reencrypt_api_keys", stdout=open(os.devnull, "w"))  # noqa: SIM115
    new_token = stored_column(endpoint)
    assert new_token != old_token and API_KEY not in new_token
    # 3. The old key is removed: the stored key still opens, and reaches the server.
    settings.MENTALBENCH_ENCRYPTION_KEYS = [OTHER_KEY]
    endpoint.refresh_from_db()
    run, tag = judged_once(endpoint)
    assert run.status == Run.Status.DONE
    assert [r.key_sha256 for r in fake_llm.requests_for(tag)] == [SHA]
    # The old key alone no longer opens the column.
    settings.MENTALBENCH_ENCRYPTION_KEYS = [TEST_ENCRYPTION_KEY]
    with pytest.raises(api_keys.ApiKeyError, match="cannot be decrypted"):
        api_keys.api_key_decrypt(stored=new_token)


def test_a_malformed_encryption_key_stops_start_up_without_echoing_it():
    env = {
        **os.environ,
        "MENTALBENCH_ENCRYPTION_KEYS": f"{TEST_ENCRYPTION_KEY},not-a-key-SECRETISH",
        "DJANGO_SETTINGS_MODULE": "mentalbench.settings",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "MENTALBENCH_ENCRYPTION_KEYS: key 2 is not a Fernet key" in done.stderr
    assert "SECRETISH" not in done.stderr


# ----------------------------------------------------------------- the data migration


def _migration_nodes() -> tuple[tuple[str, str], tuple[str, str]]:
    graph = MigrationExecutor(connection).loader.graph
    (node,) = [
        key
        for key in graph.nodes
        if key[0] == "judging" and key[1].endswith("_encrypt_endpoint_api_keys")
    ]
    (parent,) = [p.key for p in graph.node_map[node].parents if p.key[0] == "judging"]
    return parent, node


def _migrate(target: tuple[str, str]) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([target])


@pytest.mark.slow  # migrates the test database back and forth
@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_plaintext_keys_or_stops_with_a_clear_error(settings):
    before, node = _migration_nodes()
    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        _migrate(before)
        old_model = (
            MigrationExecutor(connection)
            .loader.project_state([before])
            .apps.get_model("judging", "ModelEndpoint")
        )
        old = old_model.objects.create(
            name="legacy", provider="openai", model="m", family="f", api_key=API_KEY
        )
        assert stored_column(old) == API_KEY
        settings.MENTALBENCH_ENCRYPTION_KEYS = []
        with pytest.raises(ImproperlyConfigured, match="legacy.*set MENTALBENCH_ENCRYPTION_KEYS"):
            _migrate(node)
        assert stored_column(old) == API_KEY  # the failed migration wrote nothing
        settings.MENTALBENCH_ENCRYPTION_KEYS = [TEST_ENCRYPTION_KEY]
        _migrate(node)
        stored = stored_column(old)
        assert stored.startswith("fernet:") and API_KEY not in stored
        assert api_keys.api_key_decrypt(stored=stored) == API_KEY
    finally:
        settings.MENTALBENCH_ENCRYPTION_KEYS = [TEST_ENCRYPTION_KEY]
        executor = MigrationExecutor(connection)
        executor.migrate(leaves)


# ----------------------------------------------------------------- keys nobody configured

WORKER_KEY = "sk-worker-own-key-that-no-endpoint-named-0123456789"


@pytest.fixture
def worker_keys(monkeypatch):
    """The worker's own provider keys, as an operator might have them in its environment."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.setenv(name, WORKER_KEY)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_keyless_provider_endpoint_is_refused_and_never_sends_the_workers_key(
    study, endpoint_factory, fake_llm, worker_keys, provider
):
    # An editor points a keyless openai/anthropic endpoint at a server of their choice.
    endpoint = endpoint_factory(provider, api_key="", api_key_env="")
    run, tag = judged_once(endpoint)
    assert run.status == Run.Status.FAILED
    assert "no API key" in run.error and WORKER_KEY not in run.error
    assert fake_llm.requests_for(tag) == []  # nothing reached the server


def test_a_keyless_compatible_server_gets_the_placeholder_not_the_workers_key(
    study, endpoint_factory, fake_llm, worker_keys
):
    endpoint = endpoint_factory("openai_compatible", api_key="", api_key_env="")
    run, tag = judged_once(endpoint)
    assert run.status == Run.Status.DONE
    sent = fake_llm.requests_for(tag)
    assert sent
    assert {r.key_sha256 for r in sent} == {hashlib.sha256(b"EMPTY").hexdigest()}
    assert hashlib.sha256(WORKER_KEY.encode()).hexdigest() not in {r.key_sha256 for r in sent}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_batch_client_never_reads_the_workers_key(worker_keys, provider):
    from judging import providers
    from judging.providers import batch_api

    config = providers.EndpointConfig(
        provider=provider, model="m", base_url="http://127.0.0.1:9/v1", api_key=""
    )
    with pytest.raises(providers.PermanentError, match="no API key"):
        batch_api.client(config)
    compatible = providers.EndpointConfig(
        provider="openai_compatible", model="m", base_url="http://127.0.0.1:9/v1"
    )
    assert batch_api.client(compatible).api_key == "EMPTY"
