"""Secrets stored in the database, encrypted at rest with Fernet (docs/security.md, "Where
secrets live"): model endpoints' API keys and webhooks' signing secrets.

The keys are settings.MENTALBENCH_ENCRYPTION_KEYS: the first encrypts, every one decrypts, so a
key can be rotated (a new key goes first, the old one stays until `manage.py reencrypt_secrets`
has re-encrypted every stored value with the new one). A stored value is "fernet:<token>".

Messages say what went wrong and what to do, never a secret.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

ENCRYPTED_PREFIX = "fernet:"
ENCRYPTION_SETTING = "MENTALBENCH_ENCRYPTION_KEYS"
REENCRYPT_COMMAND = "manage.py reencrypt_secrets"


class EncryptionError(ValueError):
    """A value cannot be encrypted or decrypted as asked; the message says why (never the value)."""


def encryption_configured() -> bool:
    return bool(settings.MENTALBENCH_ENCRYPTION_KEYS)


def multi_fernet() -> MultiFernet:
    """The configured keys; EncryptionError when there are none."""
    keys = settings.MENTALBENCH_ENCRYPTION_KEYS
    if not keys:
        raise EncryptionError(
            f"{ENCRYPTION_SETTING} is not set, so secrets cannot be stored in or read from the "
            "database: set it (docs/security.md, Where secrets live)"
        )
    # settings.py has checked that every key is a valid Fernet key.
    return MultiFernet([Fernet(key) for key in keys])


def is_encrypted(stored: str) -> bool:
    return stored.startswith(ENCRYPTED_PREFIX)


def encrypt(*, plaintext: str) -> str:
    """The column value for `plaintext`, encrypted with the first configured key."""
    token = multi_fernet().encrypt(plaintext.encode()).decode("ascii")
    return ENCRYPTED_PREFIX + token


def undecryptable_message(what: str) -> str:
    return (
        f"{what} cannot be decrypted with any key in {ENCRYPTION_SETTING}: it was encrypted "
        "with a key no longer listed (keep the old key after the new one until "
        f"`{REENCRYPT_COMMAND}` has run), or the value was altered"
    )


def decrypt(*, stored: str, what: str = "the stored value") -> str:
    """The plaintext of an encrypted column value; EncryptionError when no configured key opens
    it, or when it is not encrypted at all (callers that accept a legacy plaintext value check
    `is_encrypted` first). `what` names the value in the message."""
    if not is_encrypted(stored):
        raise EncryptionError(f"{what} is not encrypted; run `{REENCRYPT_COMMAND}` to encrypt it")
    fernet = multi_fernet()
    try:
        return fernet.decrypt(stored.removeprefix(ENCRYPTED_PREFIX).encode("ascii")).decode()
    except (InvalidToken, UnicodeError):
        raise EncryptionError(undecryptable_message(what)) from None


def reencrypt(*, stored: str) -> str:
    """`stored` encrypted with the first configured key: a value encrypted with any configured
    key is re-encrypted (rotation), a plaintext one encrypted. EncryptionError when no
    configured key opens it."""
    if not is_encrypted(stored):
        return encrypt(plaintext=stored)
    fernet = multi_fernet()
    try:
        token = fernet.rotate(stored.removeprefix(ENCRYPTED_PREFIX).encode("ascii"))
    except (InvalidToken, UnicodeError):
        raise EncryptionError(undecryptable_message("the stored value")) from None
    return ENCRYPTED_PREFIX + token.decode("ascii")
