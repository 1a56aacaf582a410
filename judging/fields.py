"""Model fields of the judging app."""

from __future__ import annotations

from typing import Any

from django.db import models

from . import api_keys


class EncryptedKeyField(models.TextField):
    """An API key at rest: the column holds "fernet:<token>", never the key itself.

    Every value written through the ORM (save, create, QuerySet.update, bulk_update) that is not
    already encrypted is encrypted with the first of settings.MENTALBENCH_ENCRYPTION_KEYS; with
    none configured the write fails (api_keys.ApiKeyError) instead of storing plaintext. Reads
    return the stored "fernet:…" text: only `api_keys.endpoint_api_key` decrypts, at call time,
    so a key never sits decrypted on a model instance that a page or a log could print.
    """

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = super().pre_save(model_instance, add)
        if isinstance(value, str) and value and not api_keys.is_encrypted(value):
            value = api_keys.api_key_encrypt(plaintext=value)
            # The saved instance holds what the column holds, not the plaintext it was given.
            setattr(model_instance, self.attname, value)
        return value

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        # QuerySet.update and bulk_update skip pre_save; this catches their plaintext.
        if isinstance(value, str) and value and not api_keys.is_encrypted(value):
            value = api_keys.api_key_encrypt(plaintext=value)
        return super().get_db_prep_save(value, connection)
