"""The admin's run pages: launch (with prompt preview), live progress, cancel/retry/resume."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from accounts.roles import CLINICIAN, role_add
from annotation.models import Rating
from judging import services
from judging.models import Run, RunItem

from .conftest import API_KEY


def test_clinicians_cannot_open_run_pages(client, db, study, endpoint_factory):
    user = get_user_model().objects.create_user("doc", password="pw-123456")
    role_add(user=user, role=CLINICIAN)
    client.force_login(user)
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory())
    for url in (
        reverse("judging:runs"),
        reverse("judging:judge_new"),
        reverse("judging:run", args=[run.pk]),
    ):
        assert client.get(url).status_code == 403
    assert client.post(reverse("judging:run_cancel", args=[run.pk])).status_code == 403


def test_preview_shows_the_exact_prompt_of_one_item(staff_client, study, endpoint_factory):
    endpoint = endpoint_factory()
    page = staff_client.get(
        reverse("judging:preview", args=["judge"]),
        {"study": study.pk, "endpoint": endpoint.pk},
        HTTP_HX_REQUEST="true",
    )
    html = page.content.decode()
    assert page.status_code == 200
    assert "You are evaluating responses to mental health concerns" in html
    assert "Guidance (1-5)" in html and "I have been feeling low" in html
    generation = staff_client.get(
        reverse("judging:preview", args=["generation"]), {"study": study.pk}
    ).content.decode()
    assert "You are a licensed psychiatrist" in generation


def test_launch_from_the_page_runs_in_process_in_demo_mode(
    staff_client, study, endpoint_factory, eager_celery, django_capture_on_commit_callbacks
):
    endpoint = endpoint_factory()
    form = staff_client.get(reverse("judging:judge_new"))
    assert form.status_code == 200 and "Preview the prompt" in form.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        answer = staff_client.post(
            reverse("judging:judge_new"),
            {
                "study": study.pk,
                "endpoint": endpoint.pk,
                "subset": "all",
                "sample_seed": 0,
                "repeats": 1,
                "max_tokens": 1024,
                "max_output_attempts": 3,
                "concurrency": 8,
                "parallel_tasks": 1,
                "confirm_cost": "on",
            },
        )
    run = Run.objects.get()
    assert answer.status_code == 302 and answer.url == reverse("judging:run", args=[run.pk])
    run.refresh_from_db()
    assert run.status == Run.Status.DONE
    assert Rating.objects.filter(run=run, status="complete").count() == 6
    page = staff_client.get(answer.url).content.decode()
    assert "6 / 6 items" in page and "Done" in page and "cost so far 0.0" in page
    # The htmx partial of a finished run stops polling.
    partial = staff_client.get(answer.url, HTTP_HX_REQUEST="true").content.decode()
    assert partial.lstrip().startswith('<section id="run-progress"')
    assert "hx-trigger" not in partial


def test_generation_launch_for_several_models(
    staff_client, study, endpoint_factory, eager_celery, django_capture_on_commit_callbacks
):
    first, second = endpoint_factory(name="model a"), endpoint_factory(name="model b")
    with django_capture_on_commit_callbacks(execute=True):
        answer = staff_client.post(
            reverse("judging:generation_new"),
            {
                "study": study.pk,
                "endpoints": [first.pk, second.pk],
                "temperature": 0.7,
                "max_tokens": 512,
                "concurrency": 4,
                "parallel_tasks": 1,
                "confirm_cost": "on",
            },
        )
    assert answer.status_code == 302
    assert sorted(Run.objects.values_list("status", flat=True)) == ["done", "done"]
    assert RunItem.objects.filter(status="done").count() == 6  # 3 conversations × 2 models


def test_running_page_polls_and_offers_cancel_then_resume(
    staff_client,
    study,
    endpoint_factory,
    django_assert_max_num_queries,
    django_capture_on_commit_callbacks,
):
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory())
    url = reverse("judging:run", args=[run.pk])
    with django_assert_max_num_queries(12):
        partial = staff_client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-trigger="every 2s"' in partial and "Cancel" in partial
    assert "0 / 6 items" in partial
    with django_capture_on_commit_callbacks(execute=True):
        staff_client.post(reverse("judging:run_cancel", args=[run.pk]))
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED  # no worker held an item
    page = staff_client.get(url).content.decode()
    assert "Resume" in page and "hx-trigger" not in page
    staff_client.post(reverse("judging:run_resume", args=[run.pk]))
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING


def test_failures_are_listed_with_reasons_and_can_be_retried(staff_client, study, endpoint_factory):
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory())
    RunItem.objects.filter(run=run).update(status="failed", last_error="HTTP 503: overloaded")
    run.status = Run.Status.DONE
    run.save(update_fields=["status"])
    page = staff_client.get(reverse("judging:run", args=[run.pk])).content.decode()
    assert "HTTP 503: overloaded" in page and "Retry failures" in page
    staff_client.post(reverse("judging:run_retry", args=[run.pk]))
    assert RunItem.objects.filter(run=run, status="pending").count() == 6


def test_admin_never_renders_the_api_key(staff_client, endpoint_factory):
    user = get_user_model().objects.get(username="boss")
    user.is_superuser = True
    user.save()
    endpoint = endpoint_factory()
    page = staff_client.get(reverse("admin:judging_modelendpoint_change", args=[endpoint.pk]))
    assert page.status_code == 200
    assert API_KEY not in page.content.decode()


def test_endpoint_form_keeps_the_base_url_scheme_and_says_what_a_bare_one_means():
    from django.core.exceptions import ValidationError

    from judging.forms import EndpointForm

    field = EndpointForm.base_fields["base_url"]
    assert field.clean("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert field.clean("api.example.org/v1") == "https://api.example.org/v1"
    assert field.clean("") == ""
    with pytest.raises(ValidationError, match="valid URL"):
        field.clean("not a url")


def test_the_preview_opened_on_its_own_is_a_whole_page(staff_client, study):
    url = reverse("judging:preview", args=["judge"])
    page = staff_client.get(url, {"study": study.pk}).content.decode()
    assert page.lstrip().startswith("<!doctype html>") and '<html lang="en">' in page
    assert "<title>Prompt preview" in page and 'class="prompt"' in page
    fragment = staff_client.get(url, {"study": study.pk}, HTTP_HX_REQUEST="true")
    assert "<html" not in fragment.content.decode()


def test_the_run_form_asks_in_the_order_people_think_and_launches_once(
    staff_client, study, endpoint_factory, eager_celery, django_capture_on_commit_callbacks
):
    """Study, endpoint, which responses, repeats first; mode, concurrency and the like folded
    under Advanced settings; opened from a study it is already chosen, and an only endpoint
    too; one Launch starts the run and records its estimate (the first Launch once showed only
    an estimate, and a box near the top had to be ticked before a second)."""
    import re

    endpoint = endpoint_factory()
    html = staff_client.get(reverse("judging:judge_new"), {"study": study.pk}).content.decode()
    form = html[html.index('id="launch-form"') :]
    main, advanced = form.split('<details class="advanced"')
    order = [m for m in re.findall(r'name="([a-z_]+)"', main) if m != "csrfmiddlewaretoken"]
    assert order[:4] == ["study", "endpoint", "subset", "sample_size"] and "repeats" in order
    for name in ("mode", "concurrency", "rate_limit", "parallel_tasks", "temperature"):
        assert f'name="{name}"' in advanced and f'name="{name}"' not in main
    assert re.search(rf'<option value="{study.pk}" selected>', main)
    assert re.search(rf'<option value="{endpoint.pk}" selected>', main)
    assert "confirm_cost" not in html and form.count('type="submit"') == 1  # one Launch
    data = {
        "study": study.pk, "endpoint": endpoint.pk, "subset": "all", "sample_seed": 0,
        "repeats": 1, "max_tokens": 1024, "max_output_attempts": 3, "concurrency": 4,
        "parallel_tasks": 1,
    }  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        answer = staff_client.post(reverse("judging:judge_new"), data)
    run = Run.objects.get()
    assert answer.status_code == 302 and answer.url == reverse("judging:run", args=[run.pk])
    assert run.cost_estimate["requests"] == RunItem.objects.filter(run=run).count()


def test_a_finished_run_leads_to_its_results(
    staff_client, study, endpoint_factory, eager_celery, django_capture_on_commit_callbacks
):
    from urllib.parse import quote_plus

    endpoint = endpoint_factory()
    with django_capture_on_commit_callbacks(execute=True):
        run = services.judge_run_create(study_id=study.id, endpoint=endpoint)
    run.refresh_from_db()
    page = staff_client.get(reverse("judging:run", args=[run.pk])).content.decode()
    results = page[page.index('id="run-results"') :]
    judge = quote_plus(run.rater.name)
    assert f'href="/analysis/studies/{study.pk}/?judge={judge}"' in results
    assert f'href="/analysis/studies/{study.pk}/judge-assisted/?judge={judge}"' in results
    csv_url = reverse("judging:run_ratings_csv", args=[run.pk])
    assert f'href="{csv_url}"' in results
    lines = staff_client.get(csv_url).content.decode().splitlines()
    assert lines[0].startswith("conversation,responder,repeat,status,error,Guidance")
    assert len(lines) - 1 == Rating.objects.filter(run=run).count() > 0


def test_the_eta_comes_from_the_rate_since_the_start_when_nothing_finished_lately(
    study, endpoint_factory
):
    from datetime import timedelta

    from django.utils import timezone

    from judging import selectors

    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory())
    items = list(RunItem.objects.filter(run=run).order_by("pk"))
    now = timezone.now()
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING, started_at=now - timedelta(seconds=600)
    )
    # One item finished ten minutes ago, none in the last thirty seconds.
    RunItem.objects.filter(pk=items[0].pk).update(
        status=RunItem.Status.DONE, finished_at=now - timedelta(seconds=590)
    )
    run.refresh_from_db()
    progress = selectors.run_progress(run=run)
    assert progress.per_second == 0
    remaining = len(items) - 1
    assert progress.eta_s == pytest.approx(remaining * 600, rel=0.01)


def test_a_settled_run_says_how_long_it_took_instead_of_an_eta(
    staff_client, study, endpoint_factory
):
    """A finished run has nothing left to estimate: its page said "Throughput 0.0 items/s ·
    ETA —" (the throughput of the last half minute, the dash of no remaining work). It says how
    long the run took and at what rate instead."""
    from datetime import timedelta

    from django.utils import timezone

    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory())
    total = RunItem.objects.filter(run=run).count()
    finished = timezone.now() - timedelta(hours=1)
    RunItem.objects.filter(run=run).update(status=RunItem.Status.DONE, finished_at=finished)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.DONE, started_at=finished - timedelta(seconds=90), finished_at=finished
    )
    page = staff_client.get(reverse("judging:run", args=[run.pk])).content.decode()
    progress = page[page.index('id="run-progress"') :]
    assert "ETA" not in progress and "Throughput 0.0" not in progress
    assert f"Took 1 min 30 s ({total / 90:.2f} items/s)" in progress
