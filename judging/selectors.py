"""Reads for LLM runs: progress, failures, the prompt preview."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db.models import Count, Max, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce, Left, Length
from django.utils import timezone

from annotation.models import Conversation, Rater, Response, Study
from annotation.selectors import study_distortion_labels, study_rubric

from . import prompts
from .models import Run, RunItem

THROUGHPUT_WINDOW_S = 30


@dataclass(frozen=True)
class RunProgress:
    total: int
    pending: int
    running: int
    done: int
    failed: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    per_second: float  # completed items per second over the last THROUGHPUT_WINDOW_S
    eta_s: float | None
    # Every completion received, stored or not (what the provider bills); the fields above
    # count the requests behind stored results only.
    billed_completions: int = 0
    billed_input_tokens: int = 0
    billed_output_tokens: int = 0
    billed_cost_usd: float = 0.0

    @property
    def unstored_tokens(self) -> int:
        """Tokens billed for answers no stored result holds (lost claims, cancels, crashes)."""
        return max(
            0,
            self.billed_input_tokens
            + self.billed_output_tokens
            - self.input_tokens
            - self.output_tokens,
        )

    @property
    def finished(self) -> int:
        return self.done + self.failed

    @property
    def percent(self) -> float:
        """Share of items finished (done or failed): how far a running run has got."""
        return 100.0 * self.finished / self.total if self.total else 0.0

    @property
    def done_percent(self) -> float:
        """Share of items done: what a settled run achieved (0 for one whose items all failed)."""
        return 100.0 * self.done / self.total if self.total else 0.0


def run_progress(*, run: Run) -> RunProgress:
    """Counters aggregated from the items: they cannot disagree with the stored results."""
    now = timezone.now()
    statuses = RunItem.Status
    row = RunItem.objects.filter(run=run).aggregate(
        total=Count("id"),
        pending=Count("id", filter=Q(status=statuses.PENDING)),
        running=Count("id", filter=Q(status=statuses.RUNNING)),
        done=Count("id", filter=Q(status=statuses.DONE)),
        failed=Count("id", filter=Q(status=statuses.FAILED)),
        recent=Count(
            "id",
            filter=Q(
                status__in=[statuses.DONE, statuses.FAILED],
                finished_at__gte=now - timedelta(seconds=THROUGHPUT_WINDOW_S),
            ),
        ),
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
        cost=Sum("cost_usd"),
        billed_completions=Sum("billed_completions"),
        billed_input_tokens=Sum("billed_input_tokens"),
        billed_output_tokens=Sum("billed_output_tokens"),
        billed_cost=Sum("billed_cost_usd"),
    )
    window: float = THROUGHPUT_WINDOW_S
    if run.started_at:
        window = max(1.0, min(window, (now - run.started_at).total_seconds()))
    per_second = row["recent"] / window
    remaining = row["pending"] + row["running"]
    # The recent rate, or where nothing finished in the window (slow items, a pause), the rate
    # since the run started: an ETA from what was measured, not a dash while items finish.
    rate = per_second
    finished = row["done"] + row["failed"]
    if not rate and finished and run.started_at:
        rate = finished / max(1.0, (now - run.started_at).total_seconds())
    eta = remaining / rate if rate and run.is_active else None
    return RunProgress(
        total=row["total"],
        pending=row["pending"],
        running=row["running"],
        done=row["done"],
        failed=row["failed"],
        input_tokens=row["input_tokens"] or 0,
        output_tokens=row["output_tokens"] or 0,
        cost_usd=row["cost"] or 0.0,
        per_second=per_second,
        eta_s=eta,
        billed_completions=row["billed_completions"] or 0,
        billed_input_tokens=row["billed_input_tokens"] or 0,
        billed_output_tokens=row["billed_output_tokens"] or 0,
        billed_cost_usd=row["billed_cost"] or 0.0,
    )


def run_failures(*, run: Run, limit: int = 50) -> list[RunItem]:
    return list(
        RunItem.objects.filter(run=run, status=RunItem.Status.FAILED)
        .select_related("response__responder", "conversation")
        .order_by("-finished_at", "id")[:limit]
    )


# A failure reason's characters that group it with others on the run page.
REASON_CHARS = 120


def run_failure_reasons(*, run: Run, limit: int = 10) -> list[dict]:
    """The most common failure reasons with their counts over every failed item, grouped by
    their first 120 characters (a longer reason ends in "…": the latest failed items show it
    whole)."""
    rows = (
        RunItem.objects.filter(run=run, status=RunItem.Status.FAILED)
        .annotate(reason=Left("last_error", REASON_CHARS))
        .values("reason")
        .annotate(count=Count("id"), longest=Max(Length("last_error")))
        .order_by("-count", "reason")[:limit]
    )
    return [
        {
            "reason": (row["reason"] or "unknown") + ("…" if row["longest"] > REASON_CHARS else ""),
            "count": row["count"],
        }
        for row in rows
    ]


def runs_list(*, study=None) -> list[Run]:
    """The latest runs, each with `failed_count` and, where some failed, `item_count`: a settled
    run whose items failed must say so in the list, not just "Done".

    Failed items are counted per run on the (run, status) index; all items only for the runs
    with failures (a run of 100,000 items costs its whole index range to count).
    """
    failed = (
        RunItem.objects.filter(run=OuterRef("pk"), status=RunItem.Status.FAILED)
        .order_by()
        .values("run")
        .annotate(n=Count("id"))
        .values("n")
    )
    rows = Run.objects.select_related("study", "endpoint")
    if study is not None:
        rows = rows.filter(study=study)
    runs: list[Run] = list(
        rows.annotate(failed_count=Coalesce(Subquery(failed), 0)).order_by("-created_at")[:100]
    )
    failing = [run.pk for run in runs if getattr(run, "failed_count", 0)]
    totals = dict(
        RunItem.objects.filter(run_id__in=failing)
        .order_by()
        .values("run_id")
        .annotate(n=Count("id"))
        .values_list("run_id", "n")
    )
    for run in runs:
        run.item_count = totals.get(run.pk, 0)  # type: ignore[attr-defined]
    return runs


@dataclass(frozen=True)
class PromptPreview:
    target: str
    system: str
    user: str
    error: str = ""


def prompt_preview(*, study_id: int, kind: str, endpoint=None) -> PromptPreview:
    """The exact (system, user) messages the first item of such a run would send."""
    try:
        if kind == Run.Kind.JUDGE:
            rater = Rater.objects.filter(name=endpoint.name).first() if endpoint else None
            responses = Response.objects.filter(conversation__study_id=study_id).exclude(text="")
            if rater is not None:
                responses = responses.exclude(responder__key__in=rater.excluded_responders)
            # Responses are blinded for judges too: the preview names it by id only.
            response = responses.select_related("conversation").order_by("id").first()
            if response is None:
                return PromptPreview("", "", "", "this study has no response with text to rate")
            system, user = prompts.judge_messages(
                response.conversation.context, response.text, study_rubric(study_id=study_id)
            )
            return PromptPreview(f"response #{response.id}", system, user)
        conversation = Conversation.objects.filter(study_id=study_id).order_by("id").first()
        if conversation is None:
            return PromptPreview("", "", "", "this study has no conversations")
        if kind == Run.Kind.LABELLING:
            scheme = Study.objects.values_list("label_scheme", flat=True).get(pk=study_id)
            system, user = prompts.labelling_messages(
                conversation.context,
                labels=study_distortion_labels(study_id=study_id),
                scheme=scheme,
            )
            return PromptPreview(f"conversation {conversation.external_id}", system, user)
        system, user = prompts.generation_messages(conversation.context)
        return PromptPreview(f"conversation {conversation.external_id}", system, user)
    except ValueError as exc:
        return PromptPreview("", "", "", str(exc))


def run_rating_rows(*, run: Run) -> tuple[list[str], list[list[Any]]]:
    """The run's ratings as CSV rows for its admins: conversation, responder, repeat, status,
    the error of an invalid one, and one column per rubric attribute (empty where unscored).
    Judge runs only store ratings; other kinds give the header and no row."""
    from annotation.models import Rating, Score

    attributes = [a["name"] for a in study_rubric(study_id=run.study_id)]
    header: list[str] = ["conversation", "responder", "repeat", "status", "error", *attributes]
    ratings = list(
        Rating.objects.filter(run=run)
        .order_by("response__conversation__external_id", "response__responder__key", "repeat")
        .values_list(
            "id", "response__conversation__external_id", "response__responder__key", "repeat",
            "status", "error",
        )
    )  # fmt: skip
    scores: dict[int, dict[str, int]] = {}
    for rating_id, name, value in Score.objects.filter(rating__run=run).values_list(
        "rating_id", "attribute__name", "value"
    ):
        scores.setdefault(rating_id, {})[name] = value
    rows = [
        [conversation, responder, repeat, status, error,
         *(scores.get(pk, {}).get(a, "") for a in attributes)]
        for pk, conversation, responder, repeat, status, error in ratings
    ]  # fmt: skip
    return header, rows
