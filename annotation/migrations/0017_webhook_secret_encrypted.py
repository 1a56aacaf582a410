"""Store webhooks' signing secrets encrypted (mentalbench.encryption), like endpoints' API keys.

With MENTALBENCH_ENCRYPTION_KEYS set at migration time the existing plaintext secrets are
encrypted here. Without it they stay as they are (the migration does not stop a deployment that
has no key yet): deliveries still sign with such a legacy value, and `manage.py
reencrypt_secrets` encrypts it once a key is set. The data step reads and writes the column with
SQL of its own and is self-contained on purpose: migrations must keep working when the
encryption module changes.
"""

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import migrations

import mentalbench.fields

PREFIX = "fernet:"


def _fernet() -> MultiFernet | None:
    keys = settings.MENTALBENCH_ENCRYPTION_KEYS
    return MultiFernet([Fernet(key) for key in keys]) if keys else None


def _secrets(apps, schema_editor) -> tuple[str, list[tuple[int, str]]]:
    table = apps.get_model("annotation", "Webhook")._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT id, secret FROM {table} WHERE secret <> '' ORDER BY id")
        return table, list(cursor.fetchall())


def _write(schema_editor, table: str, values: dict[int, str]) -> None:
    with schema_editor.connection.cursor() as cursor:
        for hook_id, value in values.items():
            cursor.execute(f"UPDATE {table} SET secret = %s WHERE id = %s", [value, hook_id])


def encrypt_plaintext_secrets(apps, schema_editor) -> None:
    fernet = _fernet()
    if fernet is None:
        return
    table, rows = _secrets(apps, schema_editor)
    _write(
        schema_editor,
        table,
        {
            hook_id: PREFIX + fernet.encrypt(secret.encode()).decode("ascii")
            for hook_id, secret in rows
            if not secret.startswith(PREFIX)
        },
    )


def decrypt_secrets(apps, schema_editor) -> None:
    # Going back to the schema before encryption: that code signs with the plaintext.
    table, rows = _secrets(apps, schema_editor)
    encrypted = [(hook_id, secret) for hook_id, secret in rows if secret.startswith(PREFIX)]
    if not encrypted:
        return
    fernet = _fernet()
    if fernet is None:
        raise ImproperlyConfigured(
            "MENTALBENCH_ENCRYPTION_KEYS is not set: the stored webhook secrets cannot be decrypted"
        )
    values = {}
    for hook_id, secret in encrypted:
        try:
            values[hook_id] = fernet.decrypt(secret.removeprefix(PREFIX).encode()).decode()
        except InvalidToken:
            raise ImproperlyConfigured(
                f"the stored secret of webhook {hook_id} cannot be decrypted with "
                "MENTALBENCH_ENCRYPTION_KEYS"
            ) from None
    _write(schema_editor, table, values)


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0016_adjudication"),
    ]

    operations = [
        migrations.AlterField(
            model_name="webhook",
            name="secret",
            field=mentalbench.fields.EncryptedTextField(editable=False),
        ),
        migrations.RunPython(encrypt_plaintext_secrets, decrypt_secrets),
    ]
