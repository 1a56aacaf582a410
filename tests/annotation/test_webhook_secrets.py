"""Webhook secrets at rest: encrypted in the column, decrypted only to sign a delivery, a legacy
plaintext one still signing until `reencrypt_secrets` encrypts it, key rotation, refusal without
a key, and the secret kept out of logs and the admin."""

from __future__ import annotations

import logging

import pytest
from cryptography.fernet import Fernet
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.urls import reverse

from annotation.models import Webhook, WebhookDelivery
from annotation.services.webhooks import (
    webhook_create,
    webhook_emit,
    webhook_secret,
    webhooks_deliver_due,
)
from annotation.webhook_signing import SIGNATURE_HEADER, signature_verify
from mentalbench.encryption import EncryptionError
from tests.annotation.test_webhooks import receiver  # noqa: F401 - the loopback receiver fixture
from tests.conftest import TEST_ENCRYPTION_KEY

OTHER_KEY = Fernet.generate_key().decode()


def stored_column(hook: Webhook) -> str:
    """What the database itself holds, read past the ORM."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT secret FROM {Webhook._meta.db_table} WHERE id = %s", [hook.pk])
        return cursor.fetchone()[0]


def raw_secret(hook: Webhook, value: str) -> None:
    """A row as the migration leaves it when no key was configured: plaintext in the column."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Webhook._meta.db_table} SET secret = %s WHERE id = %s", [value, hook.pk]
        )


def delivered_once(receiver) -> tuple[dict[str, str], bytes]:  # noqa: F811
    before = len(receiver.received)
    webhook_emit(event="release.ready", study_id=None, data={"study": 1})
    assert webhooks_deliver_due() == 1
    assert len(receiver.received) == before + 1
    return receiver.received[-1]


def hook_made(url: str) -> tuple[Webhook, str]:
    return webhook_create(url=url, events=["release.ready"], study=None, created_by=None)


def test_the_column_holds_ciphertext_and_a_delivery_verifies_with_the_secret_shown(
    db,
    receiver,  # noqa: F811
):
    hook, secret = hook_made(receiver.url)
    stored = stored_column(hook)
    assert stored.startswith("fernet:") and secret not in stored
    # The instance holds what the column holds, never the plaintext.
    assert hook.secret == stored
    assert Webhook.objects.get().secret == stored
    headers, body = delivered_once(receiver)
    assert signature_verify(secret=secret, body=body, header=headers[SIGNATURE_HEADER])
    assert WebhookDelivery.objects.get().status == "delivered"


def test_a_legacy_plaintext_secret_still_signs_and_the_command_encrypts_it(
    db,
    receiver,  # noqa: F811
    capsys,
):
    hook, _ = hook_made(receiver.url)
    legacy = "a" * 64
    raw_secret(hook, legacy)
    headers, body = delivered_once(receiver)
    assert signature_verify(secret=legacy, body=body, header=headers[SIGNATURE_HEADER])
    call_command("reencrypt_secrets")
    assert "1 webhook secret(s)" in capsys.readouterr().out
    assert stored_column(hook).startswith("fernet:")
    headers, body = delivered_once(receiver)
    assert signature_verify(secret=legacy, body=body, header=headers[SIGNATURE_HEADER])


def test_rotation_with_two_keys(db, receiver, settings):  # noqa: F811
    hook, secret = hook_made(receiver.url)
    old_token = stored_column(hook)
    # 1. The new key goes first; the old one stays and still opens the secret.
    settings.MENTALBENCH_ENCRYPTION_KEYS = [OTHER_KEY, TEST_ENCRYPTION_KEY]
    hook.refresh_from_db()
    assert webhook_secret(webhook=hook) == secret
    # 2. Re-encrypt with the new key (the old command name does the same).
    call_command("reencrypt_api_keys", stdout=open("/dev/null", "w"))  # noqa: SIM115
    new_token = stored_column(hook)
    assert new_token != old_token and new_token.startswith("fernet:")
    # 3. The old key is removed: deliveries still verify with the secret shown at creation.
    settings.MENTALBENCH_ENCRYPTION_KEYS = [OTHER_KEY]
    headers, body = delivered_once(receiver)
    assert signature_verify(secret=secret, body=body, header=headers[SIGNATURE_HEADER])


def test_a_secret_no_key_opens_is_not_rewritten_and_the_error_names_the_hook(db, settings):
    hook, secret = hook_made("https://lab.example/hook")
    before = stored_column(hook)
    settings.MENTALBENCH_ENCRYPTION_KEYS = [OTHER_KEY]
    with pytest.raises(CommandError, match=rf"nothing re-encrypted.*webhook {hook.pk} \(lab") as e:
        call_command("reencrypt_secrets")
    assert secret not in str(e.value) and before not in str(e.value)
    assert stored_column(hook) == before
    # The delivery is not sent unsigned: the attempt fails with the same kind of message.
    webhook_emit(event="release.ready", study_id=None, data={})
    webhooks_deliver_due()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == "pending" and "cannot be decrypted" in delivery.last_error
    assert f"webhook {hook.pk} (lab.example)" in delivery.last_error


def test_creating_a_webhook_without_a_key_is_refused(client, admin_member, settings):
    settings.MENTALBENCH_ENCRYPTION_KEYS = []
    client.force_login(admin_member)
    page = client.post(
        reverse("annotation:manage_webhooks"),
        {"url": "https://lab.example/hook", "events": ["release.ready"]},
    )
    assert page.status_code == 200
    assert "MENTALBENCH_ENCRYPTION_KEYS is not set" in page.content.decode()
    assert not Webhook.objects.exists()
    # Around the form the field refuses too: nothing half-written.
    with pytest.raises(EncryptionError, match="is not set"), transaction.atomic():
        hook_made("https://lab.example/hook")
    assert not Webhook.objects.exists()


def test_the_secret_stays_out_of_logs_and_the_admin(
    client,
    admin_member,
    receiver,  # noqa: F811
    caplog,
):
    caplog.set_level(logging.DEBUG)
    client.force_login(admin_member)
    client.post(
        reverse("annotation:manage_webhooks"),
        {"url": receiver.url, "events": ["release.ready"]},
    )
    hook = Webhook.objects.get()
    secret = webhook_secret(webhook=hook)
    delivered_once(receiver)
    assert secret not in caplog.text
    root = get_user_model().objects.create_superuser("root", password="pw-123456")
    client.force_login(root)
    for url in (
        reverse("admin:annotation_webhook_change", args=[hook.pk]),
        reverse("admin:annotation_webhook_changelist"),
    ):
        page = client.get(url)
        assert page.status_code == 200
        html = page.content.decode()
        assert secret not in html and hook.secret not in html


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_existing_secrets_only_when_a_key_is_set(settings):
    from django.db.migrations.executor import MigrationExecutor

    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    before = [("annotation", "0015_mail_deadline_digest")]
    table = Webhook._meta.db_table
    legacy = "b" * 64

    def column() -> str:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT secret FROM {table}")
            return cursor.fetchone()[0]

    try:
        MigrationExecutor(connection).migrate(before)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (url, events, secret, enabled, created_at) "
                "VALUES ('https://lab.example/', '[]', %s, true, now())",
                [legacy],
            )
        # No key at migration time: the row stays as it was, and still signs.
        settings.MENTALBENCH_ENCRYPTION_KEYS = []
        MigrationExecutor(connection).migrate(leaves)
        assert column() == legacy
        assert webhook_secret(webhook=Webhook.objects.get()) == legacy
        # With a key: encrypted by the migration; going back decrypts it.
        MigrationExecutor(connection).migrate(before)
        settings.MENTALBENCH_ENCRYPTION_KEYS = [TEST_ENCRYPTION_KEY]
        MigrationExecutor(connection).migrate(leaves)
        assert column().startswith("fernet:")
        assert webhook_secret(webhook=Webhook.objects.get()) == legacy
        MigrationExecutor(connection).migrate(before)
        assert column() == legacy
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table}")
        MigrationExecutor(connection).migrate(leaves)
