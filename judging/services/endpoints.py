"""Model endpoints as the admin manages them from /judging/: create, edit, disable, and test
the connection with one tiny request through the provider client.

Who may do what (docs/endpoints.md): every admin (staff or the *admin* group) sees the list and
may test a connection, as they may launch runs on any endpoint; creating and editing need
Django's model permissions (judging.add_modelendpoint / judging.change_modelendpoint), as in
Django's admin: an endpoint names the URL its key is sent to.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from .. import providers
from ..models import ModelEndpoint, Run
from .launch import RunError, endpoint_config

#: The providers a judge or labelling run can call (offline vLLM only generates).
HTTP_PROVIDERS = (
    ModelEndpoint.Provider.OPENAI,
    ModelEndpoint.Provider.ANTHROPIC,
    ModelEndpoint.Provider.OPENAI_COMPATIBLE,
)

#: A connection test waits at most this long, whatever the endpoint's own timeout (a local
#: model's may be ten minutes): the admin is waiting on the page.
TEST_TIMEOUT_S = 20.0
TEST_PROMPT = "Reply with the single word OK."
TEST_MAX_TOKENS = 16

ADD_PERMISSION = "judging.add_modelendpoint"
CHANGE_PERMISSION = "judging.change_modelendpoint"


# ------------------------------------------------------------------------------ reads


def endpoints_for_launch(*, kind: str) -> QuerySet[ModelEndpoint]:
    """The enabled endpoints a new run of `kind` may use."""
    endpoints = ModelEndpoint.objects.filter(enabled=True)
    if kind != Run.Kind.GENERATION:
        endpoints = endpoints.filter(provider__in=HTTP_PROVIDERS)
    return endpoints.order_by("name")


def endpoints_list() -> QuerySet[ModelEndpoint]:
    """Every endpoint, enabled first, with how many runs used each."""
    from django.db.models import Count

    return ModelEndpoint.objects.annotate(run_count=Count("runs")).order_by("-enabled", "name")


def user_can_add_endpoints(*, user: Any) -> bool:
    return bool(user.has_perm(ADD_PERMISSION))


def user_can_change_endpoints(*, user: Any) -> bool:
    return bool(user.has_perm(CHANGE_PERMISSION))


# ------------------------------------------------------------------------------ writes


_EDITABLE = frozenset(
    f.name
    for f in ModelEndpoint._meta.get_fields()
    if getattr(f, "editable", False) and f.name not in ("id", "created_at")
)


@transaction.atomic
def endpoint_save(*, endpoint: ModelEndpoint | None = None, **fields: Any) -> ModelEndpoint:
    """Create an endpoint (`endpoint` None) or change one; validated as a whole (model
    validators: the API key variable rule, structured output per provider) before anything is
    written. Raises django.core.exceptions.ValidationError."""
    unknown = set(fields) - _EDITABLE
    if unknown:
        raise ValueError(f"not endpoint fields: {', '.join(sorted(unknown))}")
    if endpoint is None:
        endpoint = ModelEndpoint()
    else:
        endpoint = ModelEndpoint.objects.select_for_update().get(pk=endpoint.pk)
    for name, value in fields.items():
        setattr(endpoint, name, value)
    endpoint.full_clean()
    endpoint.save()
    return endpoint


def endpoint_set_enabled(*, endpoint_id: int, enabled: bool) -> ModelEndpoint:
    """Offer the endpoint for new runs, or stop offering it. Runs that use it are not touched:
    they keep their endpoint (resume and retry still work)."""
    updated = ModelEndpoint.objects.filter(pk=endpoint_id).update(enabled=enabled)
    if not updated:
        raise ModelEndpoint.DoesNotExist(f"no endpoint {endpoint_id}")
    return ModelEndpoint.objects.get(pk=endpoint_id)


# ------------------------------------------------------------------------------ test


@dataclass(frozen=True)
class ConnectionTest:
    """What one tiny request to the endpoint showed. `problem` names what failed ("key",
    "auth", "model", "connection", "timeout", "rate limit", "server", "answer", "offline");
    the message never holds the API key."""

    ok: bool
    message: str
    latency_s: float | None = None
    model: str = ""  # the model name the server answered with
    problem: str = ""

    @property
    def latency_ms(self) -> int | None:
        return None if self.latency_s is None else round(self.latency_s * 1000)


def endpoint_test_connection(*, endpoint: ModelEndpoint) -> ConnectionTest:
    """Send one tiny request (a few tokens) through the provider client, without retries."""
    if endpoint.provider == ModelEndpoint.Provider.VLLM_OFFLINE:
        return ConnectionTest(
            ok=False,
            problem="offline",
            message="Offline vLLM endpoints run inside a GPU worker: there is no server to "
            "connect to. Launch a small generation run to try it.",
        )
    try:
        config = endpoint_config(endpoint=endpoint)
    except (providers.ProviderError, RunError) as exc:
        # No key, an unset or refused variable, a key that cannot be decrypted.
        return ConnectionTest(ok=False, problem="key", message=_sentence(str(exc)))
    config = dataclasses.replace(config, timeout=min(config.timeout, TEST_TIMEOUT_S))
    started = time.perf_counter()
    try:
        completion = asyncio.run(
            providers.complete(
                config, user=TEST_PROMPT, max_tokens=TEST_MAX_TOKENS, temperature=None
            )
        )
    except providers.ProviderError as exc:
        problem, message = _explain(exc, config)
        return ConnectionTest(
            ok=False,
            problem=problem,
            message=providers.redact(message, config.api_key),
            latency_s=time.perf_counter() - started,
        )
    answered = completion.model or ""
    same = answered == config.model or answered.startswith(config.model + "-")
    note = "" if same or not answered else f" (asked for {config.model})"
    return ConnectionTest(
        ok=True,
        latency_s=completion.latency_s,
        model=answered,
        message=f"Connected: {answered or config.model} answered in "
        f"{round(completion.latency_s * 1000)} ms{note}.",
    )


def _explain(exc: providers.ProviderError, config: providers.EndpointConfig) -> tuple[str, str]:
    """(problem, a sentence for the admin) for a failed test request."""
    where = config.base_url or f"{config.provider}'s API"
    detail = str(exc).removeprefix(f"{config.label}: ")
    status = exc.status_code
    if exc.reason == "timeout":
        return "timeout", (
            f"Timeout: {where} did not answer within {config.timeout:g} s. The server may be "
            "overloaded or the address may lead nowhere (a firewall drops the packets)."
        )
    if exc.reason == "connection":
        if "refused" in detail.lower():
            return "connection", (
                f"Connection refused at {where}: nothing is listening there. Is the server "
                "running, and are the host and port right?"
            )
        return "connection", f"Could not connect to {where}: {detail}"
    if status in (401, 403):
        return "auth", (
            f"Authentication failed (HTTP {status}): the server refused the API key. Check the "
            f"key, or the environment variable named in the endpoint. The server said: {detail}"
        )
    if status == 404:
        return "model", (
            f"Model or address unknown (HTTP 404): {where} has no model {config.model!r}, or "
            f"the base URL is wrong. The server said: {detail}"
        )
    if status == 429:
        return "rate limit", (
            f"Rate limited (HTTP 429): the key works but its quota or rate limit is "
            f"exhausted. The server said: {detail}"
        )
    if status is not None and status >= 500:
        return "server", f"The server failed (HTTP {status}): {detail}"
    if status is not None:
        return "request", f"The server refused the request (HTTP {status}): {detail}"
    if exc.reason == "client" and "no API key" in detail:
        return "key", _sentence(detail)
    if exc.reason == "body":
        return "answer", f"The server answered, but not as an LLM API would: {detail}"
    return "client", _sentence(detail)


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] if text else "Unknown error."
