"""Encrypt API keys stored in plain text, and restrict api_key_env to allowed variable names.

The data step reads and writes the column with SQL of its own, not through the model field, so
it does the same thing whatever the field class does later. It is self-contained on purpose:
migrations must keep working when judging.api_keys changes.
"""

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import migrations, models

import judging.api_keys
import judging.fields

PREFIX = "fernet:"


def _fernet() -> MultiFernet | None:
    keys = settings.MENTALBENCH_ENCRYPTION_KEYS
    return MultiFernet([Fernet(key) for key in keys]) if keys else None


def _stored_keys(apps, schema_editor) -> tuple[str, list[tuple[int, str, str]]]:
    table = apps.get_model("judging", "ModelEndpoint")._meta.db_table
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT id, name, api_key FROM {table} WHERE api_key <> '' ORDER BY id")
        return table, list(cursor.fetchall())


def _write(schema_editor, table: str, values: dict[int, str]) -> None:
    with schema_editor.connection.cursor() as cursor:
        for endpoint_id, value in values.items():
            cursor.execute(f"UPDATE {table} SET api_key = %s WHERE id = %s", [value, endpoint_id])


def encrypt_plaintext_keys(apps, schema_editor) -> None:
    table, rows = _stored_keys(apps, schema_editor)
    plaintext = [(i, name, key) for i, name, key in rows if not key.startswith(PREFIX)]
    if not plaintext:
        return
    fernet = _fernet()
    if fernet is None:
        names = ", ".join(name for _, name, _ in plaintext)
        raise ImproperlyConfigured(
            f"{len(plaintext)} model endpoint(s) store an API key in plain text ({names}); set "
            "MENTALBENCH_ENCRYPTION_KEYS (docs/judging.md, Keys) and run migrate again to "
            "encrypt them"
        )
    _write(
        schema_editor,
        table,
        {i: PREFIX + fernet.encrypt(key.encode()).decode("ascii") for i, _, key in plaintext},
    )


def decrypt_keys(apps, schema_editor) -> None:
    # Going back to the schema before encryption: that code reads plaintext.
    table, rows = _stored_keys(apps, schema_editor)
    encrypted = [(i, name, key) for i, name, key in rows if key.startswith(PREFIX)]
    if not encrypted:
        return
    fernet = _fernet()
    if fernet is None:
        raise ImproperlyConfigured(
            "MENTALBENCH_ENCRYPTION_KEYS is not set: the stored API keys cannot be decrypted"
        )
    values = {}
    for endpoint_id, name, key in encrypted:
        try:
            values[endpoint_id] = fernet.decrypt(key.removeprefix(PREFIX).encode()).decode()
        except InvalidToken:
            raise ImproperlyConfigured(
                f"the stored API key of {name} cannot be decrypted with MENTALBENCH_ENCRYPTION_KEYS"
            ) from None
    _write(schema_editor, table, values)


class Migration(migrations.Migration):
    dependencies = [
        ("judging", "0002_runs_and_items"),
    ]

    operations = [
        migrations.AlterField(
            model_name="modelendpoint",
            name="api_key",
            field=judging.fields.EncryptedKeyField(blank=True),
        ),
        migrations.AlterField(
            model_name="modelendpoint",
            name="api_key_env",
            field=models.CharField(
                blank=True, max_length=100, validators=[judging.api_keys.validate_api_key_env]
            ),
        ),
        migrations.RunPython(encrypt_plaintext_keys, decrypt_keys),
    ]
