"""Structured outputs per endpoint: the schema built from the rubric / label set, the request
shape each server dialect gets, and runs that store what the same never-guess parser accepts.

Over real HTTP against the fake server (which records every request body), through the
official SDKs.
"""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from django.core.exceptions import ValidationError

from annotation.models import LabelAnnotation, Rating
from annotation.selectors import study_distortion_labels, study_rubric
from judging import providers, services, structured
from judging.models import ModelEndpoint, Run
from judging.prompts import DEFAULT_DISTORTIONS, DEFAULT_RUBRIC, judge_messages
from judging.providers import EndpointConfig, OutputSchema, complete
from tests.factories import case_context, case_reply, distortion_study_make, study_make
from tests.fakes.llm_server import FakeLLMServer, request_schema, scenario

from .conftest import API_KEY

ATTRIBUTES = [a["name"] for a in DEFAULT_RUBRIC]
JUDGE_SCHEMA = structured.judge_output_schema(DEFAULT_RUBRIC)


def _marker() -> str:
    return scenario("ok", key=uuid.uuid4().hex[:10])


def _ask(server: FakeLLMServer, provider: str, mode: str, *, json_mode: bool = True):
    """One judge request with the rubric's schema; returns (completion, recorded body)."""
    base = server.anthropic_base_url if provider == "anthropic" else server.openai_base_url
    config = EndpointConfig(
        provider=provider,
        model=f"fake-{provider}",
        base_url=base,
        api_key=API_KEY,
        structured_output=mode,
        timeout=5.0,
    )
    marker = _marker()
    system, user = judge_messages("I cannot sleep.", f"Try a routine. {marker}")
    completion = asyncio.run(
        complete(
            config,
            system=system,
            user=user,
            json_mode=json_mode,
            schema=OutputSchema(name=structured.JUDGE_SCHEMA_NAME, schema=JUDGE_SCHEMA),
        )
    )
    (recorded,) = server.requests_for(marker)
    return completion, recorded.body


# ------------------------------------------------------------------------------ schemas


def test_judge_schema_gives_each_attribute_its_levels_as_an_enum_and_allows_nothing_else():
    properties = JUDGE_SCHEMA["properties"]
    assert list(properties) == [*ATTRIBUTES, "Overall", "Explanation"]
    for name in ATTRIBUTES:
        # An enum, never minimum/maximum: llama.cpp's grammar ignores bounds.
        assert properties[name] == {"type": "integer", "enum": [1, 2, 3, 4, 5]}
    assert JUDGE_SCHEMA["required"] == list(properties)
    assert JUDGE_SCHEMA["additionalProperties"] is False


def test_judge_schema_follows_a_custom_rubric_scale():
    rubric = [{"name": "Warmth", "anchors": {0: "none", 1: "some", 2: "much"}}]
    schema = structured.judge_output_schema(rubric)
    assert schema["properties"]["Warmth"]["enum"] == [0, 1, 2]


def test_label_schema_lists_the_label_set_and_caps_the_ranked_scheme_at_two():
    ranked = structured.labels_output_schema(DEFAULT_DISTORTIONS, scheme="ranked")
    multi = structured.labels_output_schema(DEFAULT_DISTORTIONS, scheme="multi")
    items = ranked["properties"]["labels"]["items"]["enum"]
    shown = [d.get("prompt_label") or d["name"] for d in DEFAULT_DISTORTIONS]
    assert items == list(dict.fromkeys(shown))
    assert "No Distortion" in items
    assert ranked["properties"]["labels"]["maxItems"] == 2
    assert "maxItems" not in multi["properties"]["labels"]


def test_a_mode_the_provider_does_not_speak_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="Anthropic endpoints use 'anthropic_tool'"):
        EndpointConfig(provider="anthropic", model="m", structured_output="json_schema")
    with pytest.raises(ValueError, match="is for Anthropic endpoints"):
        EndpointConfig(provider="openai", model="m", structured_output="anthropic_tool")
    with pytest.raises(ValueError, match="unknown structured output mode 'yaml'"):
        EndpointConfig(provider="openai", model="m", structured_output="yaml")


# ------------------------------------------------------------------------------ request shapes


def test_structured_output_is_off_by_default_and_sends_no_schema(fake_llm):
    completion, body = _ask(fake_llm, "openai", providers.STRUCTURED_OFF)
    assert body["response_format"] == {"type": "json_object"}  # the old JSON mode, no schema
    assert request_schema(body) is None
    assert json.loads(completion.text)["Empathy"] in range(1, 6)


def test_openai_gets_a_strict_json_schema_response_format(fake_llm):
    completion, body = _ask(fake_llm, "openai", "json_schema")
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "judge_rating", "strict": True, "schema": JUDGE_SCHEMA},
    }
    assert "guided_json" not in body
    assert json.loads(completion.text)["Overall"] in range(1, 6)


def test_vllm_guided_json_goes_in_the_body_without_a_response_format(fake_llm):
    _, body = _ask(fake_llm, "openai_compatible", "vllm_guided_json")
    assert body["guided_json"] == JUDGE_SCHEMA
    assert "response_format" not in body  # not both: vLLM would apply two constraints


def test_vllm_structured_outputs_json_goes_in_the_body(fake_llm):
    _, body = _ask(fake_llm, "openai_compatible", "vllm_structured_outputs")
    assert body["structured_outputs"] == {"json": JUDGE_SCHEMA}
    assert "response_format" not in body and "guided_json" not in body


def test_llama_cpp_gets_a_json_object_response_format_carrying_the_schema(fake_llm):
    _, body = _ask(fake_llm, "openai_compatible", "llama_cpp")
    assert body["response_format"] == {"type": "json_object", "schema": JUDGE_SCHEMA}


def test_anthropic_forces_one_tool_and_its_input_comes_back_as_json_text(fake_llm):
    completion, body = _ask(fake_llm, "anthropic", "anthropic_tool")
    assert body["tool_choice"] == {"type": "tool", "name": "judge_rating"}
    (tool,) = body["tools"]
    assert tool["name"] == "judge_rating" and tool["input_schema"] == JUDGE_SCHEMA
    # No "{" prefill beside a forced tool call.
    assert body["messages"][-1]["role"] == "user"
    answer = json.loads(completion.text)
    assert set(ATTRIBUTES) <= set(answer)
    assert completion.finish_reason == "stop" and completion.raw_finish_reason == "tool_use"


def test_without_a_schema_a_structured_endpoint_sends_none(fake_llm):
    """Generation runs pass no schema: the endpoint's mode must not constrain free text."""
    config = EndpointConfig(
        provider="openai",
        model="fake",
        base_url=fake_llm.openai_base_url,
        api_key=API_KEY,
        structured_output="json_schema",
    )
    marker = _marker()
    asyncio.run(complete(config, user=f"I feel low. {marker}"))
    (recorded,) = fake_llm.requests_for(marker)
    assert request_schema(recorded.body) is None


# ------------------------------------------------------------------------------ runs


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("provider", "mode"),
    [
        ("openai", "json_schema"),
        ("openai_compatible", "llama_cpp"),
        ("anthropic", "anthropic_tool"),
    ],
)
def test_structured_judge_run_sends_the_study_rubric_and_stores_parsed_ratings(
    endpoint_factory, fake_llm, provider, mode
):
    study = study_make(
        name=f"structured {uuid.uuid4().hex[:6]}",
        conversations=2,
        responders=("x",),
        context=case_context,
        text=case_reply,
    )
    endpoint = endpoint_factory(provider, structured_output=mode)
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint)
    services.run_work(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    stored = Rating.objects.filter(run=run)
    assert stored.count() == 2 and not stored.exclude(status="complete").exists()
    sent = [r for r in fake_llm.requests if r.body.get("model") == endpoint.model]
    schemas = [request_schema(r.body) for r in sent[-2:]]
    assert schemas == [structured.judge_output_schema(study_rubric(study_id=study.id))] * 2
    for rating in stored:
        assert json.loads(rating.raw_output)  # the raw structured answer is kept


@pytest.mark.django_db(transaction=True)
def test_a_structured_answer_off_the_scale_is_invalid_with_its_reason_never_clamped(
    endpoint_factory,
):
    """llama.cpp's grammar lets a bounded integer through as 6: the parser still decides."""
    study = study_make(
        name=f"range {uuid.uuid4().hex[:6]}",
        conversations=1,
        responders=("x",),
        text=lambda i, key: "Sleep more. " + scenario("out_of_range", key=uuid.uuid4().hex),
        context=case_context,
    )
    endpoint = endpoint_factory("openai_compatible", structured_output="llama_cpp")
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint, max_output_attempts=2)
    services.run_work(run_id=run.id)
    (rating,) = Rating.objects.filter(run=run)
    assert rating.status == Rating.Status.INVALID
    assert "6 is not on the 1–5 scale" in rating.error
    assert not rating.scores.exists()
    assert json.loads(rating.raw_output)[ATTRIBUTES[0]] == 6


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("provider", "mode"), [("openai", "json_schema"), ("anthropic", "anthropic_tool")]
)
def test_structured_labelling_run_sends_the_label_set_and_stores_labels(
    endpoint_factory, fake_llm, provider, mode
):
    study = distortion_study_make(
        messages=["I always ruin everything.", "Nobody will ever like me."]
    )
    endpoint = endpoint_factory(provider, structured_output=mode)
    run = services.labelling_run_create(
        study_id=study.id, endpoint=endpoint, repeats=2, temperature=0.7
    )
    services.run_work(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    stored = LabelAnnotation.objects.filter(run=run)
    assert stored.count() == 4 and not stored.exclude(status="complete").exists()
    sent = [r for r in fake_llm.requests if r.body.get("model") == endpoint.model][-4:]
    expected = structured.labels_output_schema(
        study_distortion_labels(study_id=study.id), scheme="ranked"
    )
    assert [request_schema(r.body) for r in sent] == [expected] * 4
    for annotation in stored:
        assert "labels" in json.loads(annotation.raw_output)


@pytest.mark.django_db
def test_endpoint_form_refuses_a_mode_its_provider_does_not_speak():
    endpoint = ModelEndpoint(
        name="claude",
        provider="anthropic",
        model="m",
        family="claude",
        structured_output="llama_cpp",
    )
    with pytest.raises(ValidationError) as caught:
        endpoint.full_clean()
    assert "structured_output" in caught.value.message_dict
