"""Distortion-labelling runs against the fake OpenAI server over real HTTP.

The work loop runs in the test process (as in test_services.py); what is stored is
LabelAnnotations of the endpoint's judge rater, one per (message, repeat).
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotation.models import LabelAnnotation
from annotation.selectors import study_distortion_labels
from annotation.services import study_get_or_create
from judging import services
from judging.models import Run, RunItem
from scoring.label_parsing import parse_label_output
from tests.factories import distortion_study_make

from .runs import label, script


@pytest.mark.django_db(transaction=True)
def test_five_runs_store_varied_answers_once_per_message_and_repeat(endpoint_factory):
    answers = [
        "Overgeneralization, Labeling",
        "Overgeneralization",
        "Labeling, Overgeneralization",
        "Overgeneralization, Mental Filter",
        "Overgeneralization",
    ]
    study = distortion_study_make(
        messages=[f"I always fail. {script(*answers)}", "I feel fine today."]
    )
    run = label(study, endpoint_factory(), temperature=0.7)
    assert run.status == Run.Status.DONE and run.repeats == 5
    stored = LabelAnnotation.objects.filter(run=run)
    assert stored.count() == 10
    assert {(a.conversation.external_id, a.repeat) for a in stored} == {
        (f"m{i}", k) for i in (0, 1) for k in range(5)
    }
    first = sorted(tuple(a.labels) for a in stored.filter(conversation__external_id="m0"))
    assert first == sorted(
        [
            ("Overgeneralization", "Labeling"),
            ("Overgeneralization",),
            ("Labeling", "Overgeneralization"),
            ("Overgeneralization", "Mental Filter"),
            ("Overgeneralization",),
        ]
    )
    for annotation in stored:
        assert annotation.status == "complete" and annotation.source == "judge"
        assert annotation.rater == run.rater and annotation.raw_output
    # The prompt sent is the paper's Ranked-Label Prompt with the study's label list.
    assert RunItem.objects.filter(run=run, status="done").count() == 10


@pytest.mark.django_db(transaction=True)
def test_multi_label_run_uses_the_mlp_and_keeps_every_label(endpoint_factory, fake_llm):
    marker = script("Mental Filter, Labeling, Should Statements")
    study = distortion_study_make(messages=[f"Nothing I do matters. {marker}"], scheme="multi")
    run = label(study, endpoint_factory(), repeats=1, temperature=0.5)
    (annotation,) = LabelAnnotation.objects.filter(run=run)
    assert annotation.labels == ["Mental Filter", "Labeling", "Should Statements"]
    (sent,) = fake_llm.requests_for(marker)
    system = sent.body["messages"][0]["content"]
    assert "COGNITIVE DISTORTIONS LIST: [" in system  # MLP prints it without backticks


@pytest.mark.django_db(transaction=True)
def test_out_of_list_label_becomes_others_with_the_verbatim_text_kept(endpoint_factory):
    study = distortion_study_make(messages=[f"I blame myself. {script('Self-Blame, Labeling')}"])
    run = label(study, endpoint_factory(), repeats=1, temperature=0.5)
    (annotation,) = LabelAnnotation.objects.filter(run=run)
    assert annotation.status == "complete"
    assert annotation.labels == ["Others", "Labeling"]
    assert annotation.others == ["Self-Blame"]
    assert annotation.raw_output == "Self-Blame, Labeling"


@pytest.mark.django_db(transaction=True)
def test_unparseable_output_is_re_asked_then_stored_invalid_never_guessed(endpoint_factory):
    marker = script("", "", "")
    study = distortion_study_make(messages=[f"Whatever. {marker}"])
    run = label(study, endpoint_factory(), repeats=1, temperature=0.5, max_output_attempts=3)
    (item,) = RunItem.objects.filter(run=run)
    assert item.status == "failed" and item.requests == 3
    assert "attempt 3" in item.last_error
    (annotation,) = LabelAnnotation.objects.filter(run=run)
    assert annotation.status == "invalid" and annotation.labels == []
    assert "no valid label output" in annotation.error


@pytest.mark.django_db(transaction=True)
def test_unparseable_then_valid_answer_is_kept_after_the_re_ask(endpoint_factory):
    study = distortion_study_make(messages=[f"Hmm. {script('', 'Labeling')}"])
    run = label(study, endpoint_factory(), repeats=1, temperature=0.5)
    (annotation,) = LabelAnnotation.objects.filter(run=run)
    assert annotation.status == "complete" and annotation.labels == ["Labeling"]
    assert RunItem.objects.get(run=run).requests == 2


@pytest.mark.django_db(transaction=True)
def test_a_result_delivered_twice_is_stored_once(endpoint_factory):
    study = distortion_study_make(messages=["I ruin everything."])
    run = services.labelling_run_create(
        study_id=study.id, endpoint=endpoint_factory(), repeats=1, temperature=0.5
    )
    plan = services.RunPlan.load(Run.objects.select_related("endpoint", "study").get(pk=run.pk))
    (item,) = services.items_claim(run_id=run.id, token="t1", limit=10)
    outcome = services.Outcome(raw_output="Labeling")
    outcome.label_parse = parse_label_output("Labeling", plan.labels, scheme="ranked")
    assert services.labelling_items_store(results=[(item, outcome)], token="t1", plan=plan) == 1
    assert services.labelling_items_store(results=[(item, outcome)], token="t1", plan=plan) == 0
    assert LabelAnnotation.objects.filter(run=run).count() == 1


@pytest.mark.django_db
def test_temperature_zero_with_repeats_is_refused_with_the_reason(endpoint_factory):
    study = distortion_study_make(messages=["I am a failure."])
    with pytest.raises(services.RunError, match="Appendix C"):
        services.labelling_run_create(
            study_id=study.id, endpoint=endpoint_factory(), repeats=5, temperature=0.0
        )
    assert not Run.objects.filter(study=study).exists()


@pytest.mark.django_db
def test_labelling_run_needs_a_distortion_study(endpoint_factory):
    study, _ = study_get_or_create(name="rating study for labelling")
    with pytest.raises(services.RunError, match="distortion"):
        services.labelling_run_create(study_id=study.id, endpoint=endpoint_factory())


@pytest.mark.django_db
def test_launch_form_refuses_temperature_zero_and_explains(admin_member_client, endpoint_factory):
    study = distortion_study_make(messages=["I am a failure."])
    endpoint = endpoint_factory()
    data = {
        "study": study.pk,
        "endpoint": endpoint.pk,
        "subset": "all",
        "sample_seed": 0,
        "repeats": 5,
        "temperature": 0,
        "max_tokens": 256,
        "max_output_attempts": 3,
        "concurrency": 4,
        "parallel_tasks": 1,
        "confirm_cost": "on",
    }
    response = admin_member_client.post(reverse("judging:labelling_new"), data)
    assert response.status_code == 200
    assert "Appendix C" in response.content.decode()
    assert not Run.objects.filter(study=study).exists()


@pytest.mark.django_db
def test_launch_form_starts_a_labelling_run_and_previews_the_prompt(
    admin_member_client, endpoint_factory, django_capture_on_commit_callbacks
):
    study = distortion_study_make(messages=["I am a failure."])
    endpoint = endpoint_factory()
    page = admin_member_client.get(reverse("judging:labelling_new")).content.decode()
    assert 'value="5"' in page  # five runs per message by default
    preview = admin_member_client.get(
        reverse("judging:preview", args=["labelling"]), {"study": study.pk}
    ).content.decode()
    assert "COGNITIVE DISTORTIONS LIST" in preview and "I am a failure." in preview
    data = {
        "study": study.pk,
        "endpoint": endpoint.pk,
        "subset": "all",
        "sample_seed": 0,
        "repeats": 5,
        "temperature": 0.5,
        "max_tokens": 256,
        "max_output_attempts": 3,
        "concurrency": 4,
        "parallel_tasks": 1,
        "confirm_cost": "on",
    }
    with django_capture_on_commit_callbacks(execute=False):
        response = admin_member_client.post(reverse("judging:labelling_new"), data)
    run = Run.objects.get(study=study)
    assert response.status_code == 302 and run.kind == "labelling"
    assert RunItem.objects.filter(run=run).count() == 5


@pytest.mark.django_db
def test_sample_subset_draws_the_same_messages_for_the_same_seed(
    endpoint_factory, django_capture_on_commit_callbacks
):
    study = distortion_study_make(messages=[f"message {i}" for i in range(10)])
    endpoint = endpoint_factory()
    drawn = []
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=False):
            run = services.labelling_run_create(
                study_id=study.id,
                endpoint=endpoint,
                subset=Run.Subset.SAMPLE,
                sample_size=4,
                sample_seed=7,
                repeats=2,
            )
        drawn.append(
            sorted(set(RunItem.objects.filter(run=run).values_list("conversation_id", flat=True)))
        )
        assert RunItem.objects.filter(run=run).count() == 8
    assert drawn[0] == drawn[1] and len(drawn[0]) == 4


@pytest.mark.django_db
@pytest.mark.parametrize("scheme", ["ranked", "multi"])
def test_a_new_study_prompts_with_the_paper_appendix_d_text(scheme):
    from judging import prompts

    study = distortion_study_make(messages=["I ruin everything."], scheme=scheme)
    labels = study_distortion_labels(study_id=study.id)
    sent = prompts.labelling_messages("I ruin everything.", labels=labels, scheme=scheme)
    paper = (
        prompts.distortion_ranked_messages("I ruin everything.")
        if scheme == "ranked"
        else prompts.distortion_multilabel_messages("I ruin everything.")
    )
    assert sent == paper
