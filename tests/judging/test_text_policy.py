"""Where a study's texts may go: a study kept to local models sends nothing to OpenAI or
Anthropic (refused before anything is sent, in the launch form and the services, and again by
the engine when the policy changed after a launch), and runs as usual on an endpoint declared
as on our own servers. Over real HTTP against the fake provider server."""

from __future__ import annotations

import json
import uuid

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from annotation.models import Rating, Study
from judging import services
from judging.models import ModelEndpoint, Run
from tests.factories import case_reply, study_make

from .runs import judge


@pytest.fixture
def local_study(db) -> Study:
    tag = uuid.uuid4().hex
    study = study_make(
        name=f"Local only {tag[:6]}",
        conversations=2,
        responders=("gpt4o", "llama_3"),
        context=lambda i: f"Patient {tag}-{i}: I cannot sleep before my exams.",
        text=case_reply,
    )
    study.text_policy = Study.TextPolicy.LOCAL_ONLY
    study.save(update_fields=["text_policy"])
    return study


def _texts_received(fake_llm, study: Study) -> int:
    """Requests of the fake server that carried one of the study's conversations."""
    tag = study.conversations.first().context.split(":")[0].rsplit("-", 1)[0]
    return sum(tag in json.dumps(r.body) for r in list(fake_llm.requests))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_hosted_provider_is_refused_before_anything_is_sent(
    local_study, endpoint_factory, fake_llm, provider
):
    endpoint = endpoint_factory(provider)
    with pytest.raises(services.RunError, match="kept to local models"):
        services.judge_run_create(study_id=local_study.pk, endpoint=endpoint)
    with pytest.raises(services.RunError, match="kept to local models"):
        services.generation_run_create(study_id=local_study.pk, endpoint=endpoint)
    # Nothing half-written, nothing sent.
    assert not Run.objects.filter(study=local_study).exists()
    assert _texts_received(fake_llm, local_study) == 0


def test_a_hosted_provider_cannot_be_declared_on_our_own_servers(endpoint_factory):
    endpoint = endpoint_factory("openai", on_premises=True)
    with pytest.raises(ValidationError, match="not the study team's"):
        endpoint.full_clean()
    # Even so declared (in the database, past the form), it does not keep texts local.
    assert not endpoint.keeps_texts_local


def test_a_local_endpoint_runs_the_study(local_study, endpoint_factory, fake_llm):
    # The fake server on loopback stands for the lead's own llama.cpp or vLLM server.
    endpoint = endpoint_factory("openai_compatible", on_premises=True)
    run = judge(local_study, endpoint)
    assert run.status == Run.Status.DONE
    assert Rating.objects.filter(run=run, status=Rating.Status.COMPLETE).count() == 4
    assert _texts_received(fake_llm, local_study) == 4


def test_the_local_models_of_this_machine_are_on_our_own_servers(db):
    for endpoint in services.local_endpoints_register(
        base_url="http://127.0.0.1:8089/v1", model="smollm2"
    ):
        assert endpoint.keeps_texts_local


def test_a_policy_set_after_the_launch_stops_the_run_before_it_sends(
    local_study, endpoint_factory, fake_llm
):
    local_study.text_policy = Study.TextPolicy.ANY
    local_study.save(update_fields=["text_policy"])
    endpoint = endpoint_factory("openai")
    run = services.judge_run_create(study_id=local_study.pk, endpoint=endpoint)
    # The lead learns the approval covers local models only, before a worker picked the run up.
    local_study.text_policy = Study.TextPolicy.LOCAL_ONLY
    local_study.save(update_fields=["text_policy"])
    services.run_work(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and "kept to local models" in run.error
    assert _texts_received(fake_llm, local_study) == 0
    # Resuming or retrying is refused the same way.
    with pytest.raises(services.RunError, match="kept to local models"):
        services.run_resume(run_id=run.pk)
    with pytest.raises(services.RunError, match="kept to local models"):
        services.run_retry_failures(run_id=run.pk)
    assert _texts_received(fake_llm, local_study) == 0


def test_the_launch_form_says_why_and_launches_nothing(
    admin_member_client, local_study, endpoint_factory, fake_llm
):
    endpoint = endpoint_factory("openai")
    response = admin_member_client.post(
        reverse("judging:judge_new"),
        {"study": local_study.pk, "endpoint": endpoint.pk, "subset": "all", "repeats": 1,
         "sample_seed": 0, "concurrency": 4, "parallel_tasks": 1, "max_output_attempts": 3},
    )  # fmt: skip
    assert response.status_code == 200
    assert "kept to local models" in response.content.decode()
    assert not Run.objects.filter(study=local_study).exists()
    assert _texts_received(fake_llm, local_study) == 0
    # The study page's judges step says where its texts may go.
    fragment = admin_member_client.get(reverse("judging:study_runs", args=[local_study.pk]))
    assert 'id="text-policy"' in fragment.content.decode()


def test_the_endpoints_page_says_which_endpoints_keep_texts_local(
    admin_member_client, endpoint_factory
):
    endpoint_factory("openai", name="hosted-one")
    endpoint_factory("openai_compatible", name="our-vllm", on_premises=True)
    html = admin_member_client.get(reverse("judging:endpoints")).content.decode()
    hosted = html.split("hosted-one")[1].split("</section>")[0]
    ours = html.split("our-vllm")[1].split("</section>")[0]
    assert "Texts leave our servers" in hosted and "On our own servers" in ours
    assert ModelEndpoint.objects.get(name="our-vllm").keeps_texts_local
