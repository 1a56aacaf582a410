"""Admin pages for LLM runs: launch, watch (htmx polling), cancel, retry failures, resume.

Thin views (docs/architecture.md): a form validates, one service writes, templates get
precomputed context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from accounts.roles import ADMIN, role_required
from annotation.csvsafe import csv_attachment, csv_text
from annotation.models import Study

from . import selectors, services
from .forms import EndpointForm, GenerationRunForm, JudgeRunForm, LabellingRunForm, PreviewForm
from .models import ModelEndpoint, Run
from .services import costs, endpoints, prices

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails

    class HtmxHttpRequest(HttpRequest):
        """A request through django_htmx's middleware (settings.MIDDLEWARE)."""

        htmx: HtmxDetails


POLL_SECONDS = 2


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def _took(run: Run, *, finished: int) -> str | None:
    """ "1 min 30 s (0.07 items/s)" for a settled run that started and finished; else None."""
    if run.is_active or not (run.started_at and run.finished_at):
        return None
    seconds = max(0.0, (run.finished_at - run.started_at).total_seconds())
    rate = finished / seconds if seconds else 0.0
    return f"{_duration(seconds)} ({rate:.2f} items/s)"


def _run_context(run: Run) -> dict:
    progress = selectors.run_progress(run=run)
    silent = run.silent_for(timezone.now())
    price = prices.endpoint_prices(endpoint=run.endpoint)
    priced = price.batch_known if run.is_batch else price.known
    return {
        # No loop heard of for longer than a lease: its workers died or are all busy.
        "silent_s": int(silent) if silent > services.LEASE_SECONDS else 0,
        "sweep_s": settings.JUDGING_SWEEP_SECONDS,
        "run": run,
        "progress": progress,
        # While it runs the bar shows how far it got; once settled, how much of it succeeded, so
        # a run whose every item failed never shows a full bar.
        "percent": f"{progress.percent if run.is_active else progress.done_percent:.1f}",
        "throughput": f"{progress.per_second:.1f}",
        "eta": _duration(progress.eta_s),
        # A settled run has nothing left to estimate: how long it took, and at what rate.
        "took": _took(run, finished=progress.done + progress.failed),
        # "price unknown" rather than the 0 an unpriced endpoint's items hold.
        "cost": prices.usd(amount=progress.cost_usd if priced else None),
        "billed_cost": prices.usd(amount=progress.billed_cost_usd if priced else None),
        "estimate": costs.estimate_display(estimate=run.cost_estimate)
        if run.cost_estimate
        else None,
        "failures": selectors.run_failures(run=run, limit=50),
        "reasons": selectors.run_failure_reasons(run=run),
        "poll": run.is_active,
        "poll_seconds": POLL_SECONDS,
        "can_cancel": run.can_cancel,
        "can_resume": run.can_resume(pending_items=progress.pending),
        "can_retry": run.can_retry(failed_items=progress.failed),
        "results": _results_links(run),
    }


def _results_links(run: Run) -> list[tuple[str, str]]:
    """Where a run's results are read: its own ratings (CSV), and for a judge run the study's
    dashboard with this judge and the judge-assisted page with it. (label, url) pairs."""
    links = [("Its ratings (CSV)", reverse("judging:run_ratings_csv", args=[run.pk]))]
    judge = run.rater.name if run.rater_id and run.rater else None
    if run.kind == Run.Kind.JUDGE and judge:
        query = urlencode({"judge": judge})
        links += [
            ("The study's dashboard with this judge",
             f"{reverse('analysis:dashboard', args=[run.study_id])}?{query}"),
            ("Judge-assisted estimates with this judge",
             f"{reverse('analysis:judge_assisted', args=[run.study_id])}?{query}"),
        ]  # fmt: skip
    if run.kind == Run.Kind.LABELLING:
        links.append(
            ("The study's distortion dashboard",
             reverse("analysis:distortions", args=[run.study_id]))
        )  # fmt: skip
    return links


@role_required(ADMIN)
def runs(request: HttpRequest) -> HttpResponse:
    return render(request, "judging/runs.html", {"runs": list(selectors.runs_list())})


@role_required(ADMIN)
def study_runs(request: HttpRequest, study_id: int) -> HttpResponse:
    """The study page's Judges step (htmx): the study's runs and the way to launch one."""
    study = get_object_or_404(Study, pk=study_id)
    return _part(
        request,
        "judging/_study_runs.html",
        {
            "study": study,
            "runs": selectors.runs_list(study=study),
            "endpoints": ModelEndpoint.objects.filter(enabled=True).count(),
        },
        title=f"Judge runs of {study.name}",
        back=(f"{reverse('annotation:manage')}?study={study.pk}#judges", study.name),
    )


@role_required(ADMIN)
def run_ratings_csv(request: HttpRequest, pk: int) -> HttpResponse:
    """A run's own ratings, one row per response (and repeat), for the admins who ran it."""
    run = get_object_or_404(Run, pk=pk)
    header, rows = selectors.run_rating_rows(run=run)
    return csv_attachment(csv_text(header, rows), filename=f"run-{run.pk}-ratings.csv")


@role_required(ADMIN)
def run_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("study", "endpoint", "rater"), pk=pk)
    template = "judging/_progress.html" if request.htmx else "judging/run.html"
    return render(request, template, _run_context(run))


def _launch_context(request: HttpRequest, kind: str, **context) -> dict:
    """What every launch page shows beside its form: the endpoints it may use, with prices."""
    usable = [
        {"endpoint": e, "prices": prices.endpoint_prices(endpoint=e)}
        for e in endpoints.endpoints_for_launch(kind=kind)
    ]
    return {
        "kind": kind,
        "usable_endpoints": usable,
        "disabled_count": ModelEndpoint.objects.filter(enabled=False).count(),
        "can_add_endpoint": endpoints.user_can_add_endpoints(user=request.user),
        "prices_taken": prices.PRICES_TAKEN,
        **context,
    }


def _initial(request: HttpRequest, form_class: type[forms.Form], kind: str) -> dict:
    """What a new launch form can choose for the person: the study it was opened for
    (``?study=``, from the study's page) and the endpoint when only one can run it."""
    initial: dict = {}
    study = request.GET.get("study", "")
    if study.isdigit() and "study" in form_class.base_fields:
        initial["study"] = int(study)
    usable = list(endpoints.endpoints_for_launch(kind=kind)[:2])
    if len(usable) == 1 and "endpoint" in form_class.base_fields:
        initial["endpoint"] = usable[0].pk
    return initial


def _estimate_of(kind: str, data: dict) -> dict | None:
    if kind == Run.Kind.GENERATION:
        return None
    return costs.launch_estimate(
        kind=kind,
        study_id=data["study"].id,
        endpoint=data["endpoint"],
        subset=data["subset"],
        sample_size=data.get("sample_size"),
        sample_seed=data.get("sample_seed") or 0,
        repeats=data["repeats"],
        max_tokens=data.get("max_tokens"),
    ).as_dict()


def _launch(request: HttpRequest, form_class: type[forms.Form], kind: str) -> HttpResponse:
    """One Launch: the estimate is shown as the form is filled in (``run_estimate``) and is
    recorded on the run; nothing asks to submit twice."""
    if request.method != "POST":
        form = form_class(initial=_initial(request, form_class, kind))
        return render(request, "judging/run_form.html", _launch_context(request, kind, form=form))
    form = form_class(request.POST)
    if form.is_valid():
        data = dict(form.cleaned_data)
        try:
            estimate = _estimate_of(kind, data)
            if kind == Run.Kind.JUDGE:
                run = services.judge_run_create(
                    study_id=data.pop("study").id, created_by=request.user, **data
                )
                costs.run_record_estimate(run_id=run.pk, estimate=estimate or {})
                return redirect("judging:run", pk=run.pk)
            if kind == Run.Kind.LABELLING:
                run = services.labelling_run_create(
                    study_id=data.pop("study").id, created_by=request.user, **data
                )
                costs.run_record_estimate(run_id=run.pk, estimate=estimate or {})
                return redirect("judging:run", pk=run.pk)
            launched = services.generation_runs_create(
                study_id=data.pop("study").id,
                endpoints=list(data.pop("endpoints")),
                created_by=request.user,
                **data,
            )
        except services.RunError as exc:
            form.add_error(None, str(exc))
        else:
            if len(launched) == 1:
                return redirect("judging:run", pk=launched[0].pk)
            messages.success(request, f"Launched {len(launched)} generation runs.")
            return redirect("judging:runs")
    return render(request, "judging/run_form.html", _launch_context(request, kind, form=form))


@role_required(ADMIN)
def run_estimate(request: HttpRequest, kind: str) -> HttpResponse:
    """The launch form's estimate (htmx, as its fields change): requests, tokens and what the
    run would cost in each mode, or why there is nothing to estimate yet."""
    forms_by_kind = {Run.Kind.JUDGE: JudgeRunForm, Run.Kind.LABELLING: LabellingRunForm}
    form_class = forms_by_kind.get(kind)  # type: ignore[call-overload]
    if form_class is None:
        return HttpResponse(status=404)
    form = form_class(request.GET)
    context: dict = {"estimate": None, "missing": ""}
    if form.is_valid():
        try:
            estimate = _estimate_of(kind, dict(form.cleaned_data))
        except services.RunError as exc:
            context["missing"] = str(exc)
        else:
            context["estimate"] = costs.estimate_display(estimate=estimate) if estimate else None
    else:
        context["missing"] = _estimate_missing(form)
    return _part(
        request,
        "judging/_estimate.html",
        context,
        title="What the run would cost",
        back=(reverse("judging:runs"), "All runs"),
    )


def _estimate_missing(form: forms.Form) -> str:
    """What the launch form still lacks for an estimate, in its own words: the study and the
    endpoint first; once both are chosen, the field that is wrong (a sample without a size, a
    number out of range), so a half-typed field never reads as a missing study."""
    if not (form.data.get("study") and form.data.get("endpoint")):
        return "Choose a study and an endpoint to see what the run would cost."
    problems = []
    for name, errors in form.errors.items():
        said = " ".join(str(error) for error in errors)
        problems.append(f"{form[name].label}: {said}" if name in form.fields else said)
    return "To see what the run would cost: " + " ".join(problems)


def _part(
    request: HttpRequest, fragment: str, context: dict, *, title: str, back: tuple[str, str]
) -> HttpResponse:
    """`fragment` for htmx; opened on its own (no script, a shared link), a whole page."""
    if getattr(request, "htmx", False):
        return render(request, fragment, context)
    page = {"fragment": fragment, "page_title": title, "back_url": back[0], "back_label": back[1]}
    return render(request, "judging/fragment_page.html", {**context, **page})


@role_required(ADMIN)
def judge_new(request: HttpRequest) -> HttpResponse:
    return _launch(request, JudgeRunForm, Run.Kind.JUDGE)


@role_required(ADMIN)
def generation_new(request: HttpRequest) -> HttpResponse:
    return _launch(request, GenerationRunForm, Run.Kind.GENERATION)


@role_required(ADMIN)
def labelling_new(request: HttpRequest) -> HttpResponse:
    return _launch(request, LabellingRunForm, Run.Kind.LABELLING)


@role_required(ADMIN)
def preview(request: HtmxHttpRequest, kind: str) -> HttpResponse:
    """The exact prompt of one item, for the launch form (htmx) or on its own."""
    form = PreviewForm(request.GET)
    context: dict = {"preview": None, "error": ""}
    if kind not in Run.Kind.values:
        context["error"] = "unknown run kind"
    elif form.is_valid():
        context["preview"] = selectors.prompt_preview(
            study_id=form.cleaned_data["study"].id,
            kind=kind,
            endpoint=form.cleaned_data.get("endpoint"),
        )
    else:
        context["error"] = "Choose a study to preview its prompt."
    # Opened on its own (no script, a shared link), it is a whole page.
    template = "judging/_preview.html" if request.htmx else "judging/preview.html"
    return render(request, template, context)


def _action(request: HttpRequest, pk: int, action, done: str) -> HttpResponse:
    run = get_object_or_404(Run, pk=pk)
    try:
        action(run_id=run.pk)
    except services.RunError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done)
    return redirect("judging:run", pk=run.pk)


@require_POST
@role_required(ADMIN)
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, services.run_cancel, "Cancelling: workers stop within seconds.")


@require_POST
@role_required(ADMIN)
def run_resume(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(request, pk, services.run_resume, "Resumed.")


@require_POST
@role_required(ADMIN)
def run_retry(request: HttpRequest, pk: int) -> HttpResponse:
    return _action(
        request, pk, services.run_retry_failures, "Failed items re-queued and the run resumed."
    )


# ------------------------------------------------------------------------------ endpoints


def _require(request: HttpRequest, allowed: bool) -> None:
    if not allowed:
        raise PermissionDenied("You may not change model endpoints (ask for the permission).")


def _endpoint_rows() -> list[dict]:
    return [
        {"endpoint": e, "prices": prices.endpoint_prices(endpoint=e)}
        for e in endpoints.endpoints_list()
    ]


@role_required(ADMIN)
def endpoint_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "judging/endpoints.html",
        {
            "rows": _endpoint_rows(),
            "can_add": endpoints.user_can_add_endpoints(user=request.user),
            "can_change": endpoints.user_can_change_endpoints(user=request.user),
            "prices_taken": prices.PRICES_TAKEN,
            "prices_source": prices.PRICES_SOURCE,
            "list_prices": prices.list_price_table(),
        },
    )


def _endpoint_form_page(
    request: HttpRequest, endpoint: ModelEndpoint | None, allowed: bool
) -> HttpResponse:
    _require(request, allowed)
    form = EndpointForm(request.POST or None, instance=endpoint)
    if request.method == "POST" and form.is_valid():
        try:
            saved = endpoints.endpoint_save(endpoint=endpoint, **form.endpoint_fields())
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            verb = "Added" if endpoint is None else "Saved"
            messages.success(request, f"{verb} endpoint {saved.name}. Test its connection below.")
            return redirect(f"{reverse('judging:endpoints')}#endpoint-{saved.pk}")
    return render(
        request,
        "judging/endpoint_form.html",
        {
            "form": form,
            "endpoint": endpoint,
            "has_stored_key": bool(endpoint and endpoint.api_key),
            "prices_taken": prices.PRICES_TAKEN,
            "list_prices": prices.list_price_table(),
        },
    )


@role_required(ADMIN)
def endpoint_new(request: HttpRequest) -> HttpResponse:
    return _endpoint_form_page(request, None, endpoints.user_can_add_endpoints(user=request.user))


@role_required(ADMIN)
def endpoint_edit(request: HttpRequest, pk: int) -> HttpResponse:
    endpoint = get_object_or_404(ModelEndpoint, pk=pk)
    return _endpoint_form_page(
        request, endpoint, endpoints.user_can_change_endpoints(user=request.user)
    )


@require_POST
@role_required(ADMIN)
def endpoint_enabled(request: HttpRequest, pk: int) -> HttpResponse:
    _require(request, endpoints.user_can_change_endpoints(user=request.user))
    endpoint = get_object_or_404(ModelEndpoint, pk=pk)
    enabled = request.POST.get("enabled") == "1"
    endpoints.endpoint_set_enabled(endpoint_id=endpoint.pk, enabled=enabled)
    if enabled:
        messages.success(request, f"{endpoint.name} is offered for new runs again.")
    else:
        messages.success(
            request,
            f"{endpoint.name} is disabled: it is no longer offered for new runs; runs that "
            "already use it keep it.",
        )
    return redirect(f"{reverse('judging:endpoints')}#endpoint-{endpoint.pk}")


@require_POST
@role_required(ADMIN)
def endpoint_test(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    """One tiny request to the endpoint; the result replaces the button's output (htmx), or a
    page of its own without JavaScript."""
    endpoint = get_object_or_404(ModelEndpoint, pk=pk)
    result = endpoints.endpoint_test_connection(endpoint=endpoint)
    context = {"endpoint": endpoint, "result": result}
    if request.htmx:
        return render(request, "judging/_endpoint_test.html", context)
    return render(request, "judging/endpoint_test.html", context)
