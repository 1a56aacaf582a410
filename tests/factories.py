"""Test data builders for every test directory, one per kind of row.

Keyword-only and named `<entity>_make`, like the services; they go through the services where
one exists (study_get_or_create, responders_ensure, role_add), so test data is made the way the
platform makes it. Importable without Django (models are imported where used): the judging
conftest imports it, and also serves the provider tests that run with `-p no:django`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from annotation.models import Rater, Study
    from judging.models import ModelEndpoint

# The key endpoint_make stores: tests check that it never leaks into pages, logs or errors.
ENDPOINT_API_KEY = "sk-test-RunKeyThatMustNeverLeak-9876543210abcdef"

# Names chosen so that a leak is unmistakable in rendered HTML.
RESPONDERS = [
    ("zz-gpt4o", "Leaky GPT-4o", "leakyfamily-openai"),
    ("zz-claude", "Leaky Claude", "leakyfamily-anthropic"),
    ("zz-llama", "Leaky Llama", "leakyfamily-meta"),
    ("zz-human", "Leaky Human Reference", "leakyfamily-human"),
]


def study_make(
    *,
    name: str = "Rating study",
    conversations: int = 3,
    responders: Sequence[tuple[str, str, str]] | Sequence[str] = RESPONDERS,
    context: Callable[[int], str] | None = None,
    text: Callable[[int, str], str] | None = None,
) -> Study:
    """A rating study with the seed rubric: conversations c0, c1, … each with one response per
    responder.

    `responders` are (key, name, family) triples, or bare keys named as an import names them.
    `context(conversation_index)` and `text(conversation_index, responder_key)` give the texts.
    By default the responses' lengths differ by responder (a length-derived attribute would show
    up) and their metadata names the model: the blinding tests look for both.
    """
    from annotation.models import Conversation, Responder, Response
    from annotation.services import responders_ensure, study_get_or_create

    study, _ = study_get_or_create(name=name)
    if responders and isinstance(responders[0], str):
        by_key = responders_ensure(keys=set(responders))
        people = [by_key[key] for key in responders]  # type: ignore[index]
    else:
        people = [
            Responder.objects.get_or_create(key=key, defaults={"name": n, "family": f})[0]
            for key, n, f in responders
        ]
    made = Conversation.objects.bulk_create(
        Conversation(
            study=study,
            external_id=f"c{c}",
            context=context(c) if context else f"I feel anxious before meetings ({c}).",
        )
        for c in range(conversations)
    )
    Response.objects.bulk_create(
        Response(
            conversation=conversation,
            responder=r,
            text=text(c, r.key)
            if text
            else f"Supportive reply number {i} to conversation {c}." + " More." * i,
            metadata={} if text else {"model": f"{r.key}-model-id"},
        )
        for c, conversation in enumerate(made)
        for i, r in enumerate(people)
    )
    return study


def distortion_study_make(
    *, messages: Sequence[str], scheme: str = "ranked", name: str = ""
) -> Study:
    """A distortion-labelling study (the paper's label set) with one conversation per message,
    external ids m0, m1, …; a fresh name unless one is given."""
    from annotation.models import Conversation, Study
    from annotation.services import study_get_or_create

    study, _ = study_get_or_create(
        name=name or f"cd {uuid.uuid4().hex[:6]}",
        kind=Study.Kind.DISTORTION_LABELLING,
        label_scheme=scheme,
    )
    Conversation.objects.bulk_create(
        Conversation(study=study, external_id=f"m{i}", context=text)
        for i, text in enumerate(messages)
    )
    return study


def clinician_make(*, username: str, password: str = "") -> Rater:
    """A clinician account (password "pw-<username>" unless given) and its rater."""
    from django.contrib.auth import get_user_model

    from annotation.models import Rater
    from annotation.roles import CLINICIAN, role_add

    user = get_user_model().objects.create_user(
        username=username, password=password or "pw-" + username
    )
    role_add(user=user, role=CLINICIAN)
    return Rater.objects.create(kind=Rater.Kind.CLINICIAN, name=username, user=user)


def case_context(c: int) -> str:
    """A conversation's opening message, for study_make(context=…) in the run tests."""
    return f"I have been feeling low for weeks and cannot sleep (case {c})."


def case_reply(c: int, key: str) -> str:
    """A short reply, for study_make(text=…) in the run tests."""
    return f"That sounds hard ({key} {c}). Talk to someone."


def texts_study_make(*, texts: dict[str, str]) -> tuple[Study, dict[str, int]]:
    """One conversation per text, one response each ("Try a regular bedtime. <text>"): returns
    (study, {label: response id})."""
    from annotation.models import Response

    labels = list(texts)
    study = study_make(
        name=f"scenario study {uuid.uuid4().hex[:6]}",
        conversations=len(labels),
        responders=("gpt4o",),
        context=case_context,
        text=lambda i, key: f"Try a regular bedtime. {texts[labels[i]]}",
    )
    ids = {
        labels[int(r.conversation.external_id[1:])]: r.id
        for r in Response.objects.filter(conversation__study=study).select_related("conversation")
    }
    return study, ids


def endpoint_make(*, base_url: str, provider: str = "openai", **overrides: object) -> ModelEndpoint:
    """An endpoint with a stored API key, a 5 s timeout and prices; a fresh name unless given."""
    from judging.models import ModelEndpoint

    options: dict[str, object] = {
        "name": f"fake-{provider}-{uuid.uuid4().hex[:6]}",
        "provider": provider,
        "model": f"fake-{provider}",
        "family": "fake",
        "base_url": base_url,
        "api_key": ENDPOINT_API_KEY,
        "timeout_s": 5.0,
        "price_input_per_mtok": 2.5,
        "price_output_per_mtok": 10.0,
    }
    options.update(overrides)
    return ModelEndpoint.objects.create(**options)
