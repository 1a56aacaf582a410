"""API keys of model endpoints: which environment variables may hold one, and encryption at rest.

An endpoint gets its key in one of two ways (docs/judging.md, "Keys"):

- `api_key_env`, the *name* of an environment variable on the workers. Only names the operator
  allowed are accepted (settings.LLM_KEY_ENV_PREFIX / LLM_KEY_ENV_ALLOWED): whoever edits an
  endpoint also chooses its URL, so any other name would let them send any worker variable
  (DATABASE_URL, SECRET_KEY) to a server of their choice. The rule is checked when an endpoint
  is validated (model field validator: admin, forms, full_clean) and again when a worker reads
  the key, so a row written before the rule existed or by raw SQL is still refused.
- `api_key`, typed into the admin and stored encrypted at rest (mentalbench.encryption: Fernet
  under settings.MENTALBENCH_ENCRYPTION_KEYS, rotatable). The column holds "fernet:<token>";
  `judging.fields.EncryptedKeyField` encrypts every value written through the ORM, so
  plaintext never reaches it.

Messages name variables and endpoints, never a key or a variable's value.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from mentalbench import encryption
from mentalbench.encryption import ENCRYPTION_SETTING, EncryptionError

from . import providers

if TYPE_CHECKING:
    from .models import ModelEndpoint

# The platform's own secrets: never an API key, whatever the operator's prefix or list allows
# (a prefix such as "MENTALBENCH_" would otherwise admit the encryption keys themselves).
RESERVED_ENV_NAMES = frozenset(
    {
        "SECRET_KEY",
        "DATABASE_URL",
        "REDIS_URL",
        "CELERY_BROKER_URL",
        "JUDGING_RATELIMIT_REDIS_URL",
        ENCRYPTION_SETTING,
    }
)


class ApiKeyError(EncryptionError):
    """A key cannot be stored, read or used as asked; the message says why (never the key)."""


# ------------------------------------------------------------------ environment variable names


def allowed_key_env_rule() -> str:
    """The operator's rule in words, for error messages and help texts."""
    parts = []
    if settings.LLM_KEY_ENV_PREFIX:
        parts.append(f"a name starting with {settings.LLM_KEY_ENV_PREFIX}")
    if settings.LLM_KEY_ENV_ALLOWED:
        parts.append(", ".join(settings.LLM_KEY_ENV_ALLOWED))
    allowed = " or ".join(parts) if parts else "none (no variable is allowed)"
    return f"allowed: {allowed} (settings LLM_KEY_ENV_PREFIX, LLM_KEY_ENV_ALLOWED)"


def key_env_refusal(name: str) -> str | None:
    """Why `name` may not be an endpoint's API key variable, or None when it may."""
    if name in RESERVED_ENV_NAMES:
        return (
            f"{name} holds one of the platform's own secrets and can never be an API key; "
            f"{allowed_key_env_rule()}"
        )
    prefix = settings.LLM_KEY_ENV_PREFIX
    if (prefix and name.startswith(prefix) and name != prefix) or (
        name in settings.LLM_KEY_ENV_ALLOWED
    ):
        return None
    return f"{name} is not an allowed API key variable; {allowed_key_env_rule()}"


def validate_api_key_env(value: str) -> None:
    """Model field validator of ModelEndpoint.api_key_env."""
    refusal = key_env_refusal(value)
    if refusal:
        raise ValidationError(refusal, code="key_env_not_allowed")


# ------------------------------------------------------------------------------ encryption


def api_key_encrypt(*, plaintext: str) -> str:
    """The column value for `plaintext`, encrypted with the first configured key."""
    try:
        return encryption.encrypt(plaintext=plaintext)
    except EncryptionError as exc:
        raise ApiKeyError(
            f"{exc}; or name an environment variable in api_key_env instead"
        ) from None


def api_key_decrypt(*, stored: str) -> str:
    """The plaintext of a column value; ApiKeyError when no configured key opens it."""
    if not encryption.is_encrypted(stored):
        raise ApiKeyError(
            "its stored API key is not encrypted (it was written around the platform, e.g. by "
            "raw SQL); run `manage.py reencrypt_api_keys` to encrypt it"
        )
    try:
        return encryption.decrypt(stored=stored, what="its stored API key")
    except EncryptionError as exc:
        raise ApiKeyError(str(exc)) from None


# ------------------------------------------------------------------------------ call time


def environment_value(name: str) -> str | None:
    """The value of the environment variable `name` on this worker, None when unset.

    The one read of the environment outside settings.py: the variable is named by an admin at
    run time (an endpoint's api_key_env), so no setting can hold it. Callers check the name
    against the operator's rule first (`key_env_refusal`).
    """
    return os.environ.get(name)


def endpoint_api_key(*, endpoint: ModelEndpoint) -> str:
    """The key to send for `endpoint`, or "" when it has none (providers.sdk_api_key then sends
    a placeholder to a server that needs no key, or refuses: never a variable nobody named).

    Checked here again, at call time, because the row may predate the validators or have been
    written by raw SQL. Raises providers.PermanentError (the run stops with the message).
    """
    try:
        if endpoint.api_key_env:
            refusal = key_env_refusal(endpoint.api_key_env)
            if refusal:
                raise ApiKeyError(f"api_key_env refused: {refusal}")
        if endpoint.api_key:
            return api_key_decrypt(stored=endpoint.api_key)
        if endpoint.api_key_env:
            value = environment_value(endpoint.api_key_env) or None
            if value is None:
                raise ApiKeyError(
                    f"the environment variable {endpoint.api_key_env} named as its API key is "
                    "not set on this worker"
                )
            return value
    except ApiKeyError as exc:
        raise providers.PermanentError(f"{endpoint.name}: {exc}", endpoint=endpoint.name) from None
    return ""


# ------------------------------------------------------------------------------ rotation


@transaction.atomic
def endpoint_api_keys_reencrypt() -> int:
    """Encrypt every stored key with the first configured key; returns how many were written.

    Keys encrypted with any configured key are re-encrypted (rotation); a plaintext value written
    around the platform is encrypted. When any key cannot be decrypted nothing is written and
    ApiKeyError names the endpoints. Locks the endpoint rows it rewrites.
    """
    from .models import ModelEndpoint

    try:
        encryption.multi_fernet()
    except EncryptionError as exc:
        raise ApiKeyError(str(exc)) from None
    rows = list(
        ModelEndpoint.objects.select_for_update()
        .exclude(api_key="")
        .order_by("id")
        .values_list("id", "name", "api_key")
    )
    rewritten: dict[int, str] = {}
    unreadable: list[str] = []
    for endpoint_id, name, stored in rows:
        try:
            rewritten[endpoint_id] = encryption.reencrypt(stored=stored)
        except EncryptionError:
            unreadable.append(name)
    if unreadable:
        raise ApiKeyError(
            f"nothing re-encrypted: the stored API key of {', '.join(unreadable)} cannot be "
            f"decrypted with any key in {ENCRYPTION_SETTING} (add the key it was encrypted "
            "with after the new one, or type the endpoint's key again in the admin)"
        )
    for endpoint_id, stored in rewritten.items():
        ModelEndpoint.objects.filter(id=endpoint_id).update(api_key=stored)
    return len(rewritten)
