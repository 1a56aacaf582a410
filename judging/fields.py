"""Model fields of the judging app."""

from __future__ import annotations

from mentalbench.fields import EncryptedTextField

from . import api_keys


class EncryptedKeyField(EncryptedTextField):
    """An endpoint's API key at rest (mentalbench.fields.EncryptedTextField), with errors worded
    for API keys (api_keys.ApiKeyError). Migration judging/0003 names this class."""

    def encrypt_value(self, plaintext: str) -> str:
        return api_keys.api_key_encrypt(plaintext=plaintext)
