"""Model fields every app may use."""

from __future__ import annotations

from typing import Any

from django.db import models

from . import encryption


class EncryptedTextField(models.TextField):
    """A secret at rest: the column holds "fernet:<token>" (mentalbench.encryption), never the
    secret itself.

    Every value written through the ORM (save, create, QuerySet.update, bulk_update) that is not
    already encrypted is encrypted with the first of settings.MENTALBENCH_ENCRYPTION_KEYS; with
    none configured the write fails (EncryptionError) instead of storing plaintext. Reads return
    the stored "fernet:…" text: only the code that uses the secret decrypts it, when it uses it,
    so a secret never sits decrypted on a model instance that a page or a log could print.
    """

    def encrypt_value(self, plaintext: str) -> str:
        """Subclasses may word the errors for their kind of secret."""
        return encryption.encrypt(plaintext=plaintext)

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = super().pre_save(model_instance, add)
        if isinstance(value, str) and value and not encryption.is_encrypted(value):
            value = self.encrypt_value(value)
            # The saved instance holds what the column holds, not the plaintext it was given.
            setattr(model_instance, self.attname, value)
        return value

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        # QuerySet.update and bulk_update skip pre_save; this catches their plaintext.
        if isinstance(value, str) and value and not encryption.is_encrypted(value):
            value = self.encrypt_value(value)
        return super().get_db_prep_save(value, connection)
