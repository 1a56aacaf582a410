"""Admin pages for LLM runs: launch, watch (htmx polling), cancel, retry failures, resume.

Thin views (docs/architecture.md): a form validates, one service writes, templates get
precomputed context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from annotation.roles import ADMIN, role_required

from . import selectors, services
from .forms import GenerationRunForm, JudgeRunForm, LabellingRunForm, PreviewForm
from .models import Run
from .services import costs

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


def _run_context(run: Run) -> dict:
    progress = selectors.run_progress(run=run)
    silent = run.silent_for(timezone.now())
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
        "eta": _duration(progress.eta_s) if run.is_active else "—",
        "cost": f"{progress.cost_usd:.4f}",
        "billed_cost": f"{progress.billed_cost_usd:.4f}",
        "failures": selectors.run_failures(run=run, limit=50),
        "reasons": selectors.run_failure_reasons(run=run),
        "poll": run.is_active,
        "poll_seconds": POLL_SECONDS,
        "can_cancel": run.can_cancel,
        "can_resume": run.can_resume(pending_items=progress.pending),
        "can_retry": run.can_retry(failed_items=progress.failed),
    }


@role_required(ADMIN)
def runs(request: HttpRequest) -> HttpResponse:
    return render(request, "judging/runs.html", {"runs": list(selectors.runs_list())})


@role_required(ADMIN)
def run_detail(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("study", "endpoint", "rater"), pk=pk)
    template = "judging/_progress.html" if request.htmx else "judging/run.html"
    return render(request, template, _run_context(run))


def _launch(request: HttpRequest, form_class: type, kind: str) -> HttpResponse:
    form = form_class(request.POST or None)
    estimate = None
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        confirmed = data.pop("confirm_cost", False)
        try:
            if kind != Run.Kind.GENERATION:
                # The admin sees the estimate for both modes before anything is launched.
                estimate = costs.launch_estimate(
                    kind=kind,
                    study_id=data["study"].id,
                    endpoint=data["endpoint"],
                    subset=data["subset"],
                    sample_size=data.get("sample_size"),
                    sample_seed=data.get("sample_seed") or 0,
                    repeats=data["repeats"],
                    max_tokens=data.get("max_tokens"),
                ).as_dict()
                if not confirmed:
                    return render(
                        request,
                        "judging/run_form.html",
                        {"form": form, "kind": kind, "estimate": estimate},
                    )
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
    return render(
        request, "judging/run_form.html", {"form": form, "kind": kind, "estimate": estimate}
    )


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
