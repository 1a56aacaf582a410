import tempfile
from pathlib import Path

from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_POST

from accounts.roles import ADMIN, CLINICIAN, AuthenticatedHttpRequest, role_required

from .calibration import calibration_after_submit
from .feedback_selectors import adjudication_feedback, adjudication_feedback_any
from .forms import (
    CredentialsForm,
    FlagForm,
    ImportForm,
    LabelSaveForm,
    ScoreSaveForm,
    UnsafeForm,
)
from .importers.base import ImportProblem, file_sha256
from .importers.limits import ImportLimits
from .importers.mentalalign import read_workbook
from .importers.mentalbench import read_conversations
from .models import Assignment, ClinicianCredentials, ConsentRecord, Rater, Study
from .selectors import (
    assignment_get_for_user,
    assignments_for_user,
    guideline_studies,
    label_page,
    next_assignment_for_user,
    progress_for_user,
    queue_for_user,
    rating_page,
    studies_awaiting_consent,
    task_kind,
)
from .services import (
    AssignmentIncomplete,
    AssignmentLocked,
    WorkbookSource,
    assignment_flag,
    assignment_heartbeat,
    assignment_submit,
    consent,
    conversations_import,
    human_workbook_sources,
    judge_rater_get_or_create,
    label_annotation_save,
    label_assignment_submit,
    mail,
    mentalalign_import,
    rating_save,
    study_get_or_create,
)
from .services.escalation import escalation_mark, escalation_withdraw
from .uploads import UploadLimitHandler


def _run_import(form: ImportForm, path: Path, user) -> tuple:
    """The same parsers and services as the management commands, in one transaction."""
    kind, label = form.cleaned_data["kind"], form.cleaned_data["file"].name
    if kind == "conversations":
        records = read_conversations(path)
    else:
        book = read_workbook(path, kind=kind)
        # Name the uploaded file, not the temporary copy, in what the admin reads.
        book.file = label
    with transaction.atomic():
        study = (
            form.cleaned_data["study"]
            or study_get_or_create(
                name=form.cleaned_data["new_study"],
                kind=form.cleaned_data["new_study_kind"] or Study.Kind.RESPONSE_RATING,
                label_scheme=form.cleaned_data["label_scheme"] or Study.LabelScheme.RANKED,
            )[0]
        )
        if kind == "conversations":
            s = conversations_import(
                study=study, records=records, file_name=label, sha256=file_sha256(path), user=user
            )
            lines = [
                f"{s['rows']} rows: {s['conversations_created']} conversations and "
                f"{s['responses_created']} responses created, "
                f"{s['conversations_already_present']} conversations already present"
            ]
            return study, lines, []
        if kind == "human":
            sources = human_workbook_sources(
                study=study,
                workbook=book,
                sha256=file_sha256(path),
                rater_name="MentalAlign-70k clinicians",
            )
        else:
            rater = judge_rater_get_or_create(name=form.cleaned_data["judge_name"].strip())
            sources = [WorkbookSource(workbook=book, rater=rater, sha256=file_sha256(path))]
        summaries = mentalalign_import(study=study, sources=sources, user=user)
    lines = [
        (f"{s['rater']}: " if len(summaries) > 1 else "")
        + f"{s['cells']} cells: {s['stored']} stored, {s['invalid']} unparseable (raw text "
        f"kept, no scores), {s['empty']} empty, {s['already_present']} already imported"
        for s in summaries
    ]
    return study, lines, [p for s in summaries for p in s["problems"]]


@csrf_exempt  # checked by csrf_protect below, once the upload limit is in place
@role_required(ADMIN)
def import_upload(request: HttpRequest) -> HttpResponse:
    # The limit must be installed before anything reads the body, and CsrfViewMiddleware would
    # read it (to find the token) before the view runs: hence exempt here, protected inside.
    handler = UploadLimitHandler(request, max_bytes=ImportLimits.from_settings().max_file_bytes)
    request.upload_handlers.insert(0, handler)
    return _import_upload(request, handler)


@csrf_protect
def _import_upload(request: HttpRequest, handler: UploadLimitHandler) -> HttpResponse:
    context: dict = {}
    if request.method == "POST":
        form = ImportForm(request.POST, request.FILES)
        if handler.exceeded:
            form.is_valid()
            form.errors.pop("file", None)
            form.add_error(
                "file",
                f"{handler.file_name or 'the upload'}: the file is more than "
                f"{handler.max_bytes:,} bytes, the import limit (IMPORT_MAX_FILE_BYTES); "
                "nothing was imported",
            )
        elif form.is_valid():
            upload = form.cleaned_data["file"]
            suffix = Path(upload.name).suffix.lower()
            with tempfile.NamedTemporaryFile(suffix=suffix) as handle:
                for chunk in upload.chunks():
                    handle.write(chunk)
                handle.flush()
                try:
                    study, summary, problems = _run_import(form, Path(handle.name), request.user)
                except (ImportProblem, ValueError) as exc:
                    # ValueError: a service refusing a name (a judge named like a clinician rater)
                    form.add_error("file", str(exc).replace(handle.name, upload.name))
                else:
                    context.update(study=study, summary=summary, problems=problems)
    else:
        form = ImportForm(initial={"study": request.GET.get("study")})
    context["form"] = form
    return render(request, "annotation/import.html", context)


# --- Clinician rating ---------------------------------------------------------------------------


def _rating_context(request: HttpRequest, assignment, **extra) -> dict:
    return {
        "page": rating_page(assignment=assignment),
        "progress": progress_for_user(user=request.user, kind=task_kind(assignment=assignment)),
        "flag_form": extra.pop("flag_form", None) or FlagForm(),
        **extra,
    }


@role_required(CLINICIAN)
def queue(request: AuthenticatedHttpRequest) -> HttpResponse:
    rater = Rater.objects.filter(user=request.user, kind=Rater.Kind.CLINICIAN).first()
    return render(
        request,
        "annotation/queue.html",
        {
            "queue": queue_for_user(user=request.user),
            "progress": progress_for_user(user=request.user),
            "next": next_assignment_for_user(user=request.user),
            "consent_studies": studies_awaiting_consent(user=request.user),
            "adjudicated": rater is not None and adjudication_feedback_any(rater=rater),
        },
    )


@role_required(CLINICIAN)
def adjudication_feedback_page(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The clinician's scores an adjudicator set otherwise, with the reason (their own only)."""
    rater = Rater.objects.filter(user=request.user, kind=Rater.Kind.CLINICIAN).first()
    conversations = [] if rater is None else adjudication_feedback(rater=rater)
    return render(
        request, "annotation/adjudication_feedback.html", {"conversations": conversations}
    )


@role_required(CLINICIAN)
def guidelines(request: HttpRequest) -> HttpResponse:
    return render(
        request, "annotation/guidelines.html", {"studies": guideline_studies(user=request.user)}
    )


def _is_labelling(assignment) -> bool:
    return assignment.conversation.study.kind == Study.Kind.DISTORTION_LABELLING


def _label_context(request: HttpRequest, assignment, **extra) -> dict:
    return {
        "page": label_page(assignment=assignment),
        "progress": progress_for_user(user=request.user, kind=task_kind(assignment=assignment)),
        "flag_form": extra.pop("flag_form", None) or FlagForm(),
        **extra,
    }


@role_required(CLINICIAN)
def rate(request: HttpRequest, token: str) -> HttpResponse:
    assignment = assignment_get_for_user(user=request.user, token=token)
    study_id = assignment.conversation.study_id
    if assignment.status in Assignment.OPEN_STATUSES and consent.consent_refusal(
        study_id=study_id, rater=assignment.rater_id
    ):
        return redirect("annotation:consent", study_id=study_id)
    if not assignments_for_user(user=request.user).filter(pk=assignment.pk).exists():
        # Real work that waits for the clinician's practice result: the queue says why.
        messages.info(request, "This task opens once your practice in this study has passed.")
        return redirect("annotation:queue")
    if _is_labelling(assignment):
        return render(request, "annotation/label.html", _label_context(request, assignment))
    return render(request, "annotation/rate.html", _rating_context(request, assignment))


@require_POST
@role_required(CLINICIAN)
def save_labels(request: AuthenticatedHttpRequest, token: str) -> HttpResponse:
    assignment = assignment_get_for_user(user=request.user, token=token)
    form = LabelSaveForm(request.POST, scheme=assignment.conversation.study.label_scheme)
    if not form.is_valid():
        return render(
            request, "annotation/_save_state.html", {"error": form.errors.as_text()}, status=400
        )
    try:
        result = label_annotation_save(
            assignment=assignment,
            user=request.user,
            labels=form.cleaned_data["labels"],
            edited_ms=form.cleaned_data["edited_ms"],
        )
    except AssignmentLocked as exc:
        return render(request, "annotation/_save_state.html", {"error": str(exc)}, status=409)
    except ValueError as exc:
        return render(request, "annotation/_save_state.html", {"error": str(exc)}, status=400)
    return render(request, "annotation/_save_state.html", {"result": result})


@require_POST
@role_required(CLINICIAN)
def save(request: AuthenticatedHttpRequest, token: str) -> HttpResponse:
    assignment = assignment_get_for_user(user=request.user, token=token)
    form = ScoreSaveForm(request.POST)
    if not form.is_valid():
        return render(
            request, "annotation/_save_state.html", {"error": form.errors.as_text()}, status=400
        )
    data = form.cleaned_data
    try:
        result = rating_save(
            assignment=assignment,
            item_token=data["item"],
            user=request.user,
            attribute_id=data["attribute"],
            score=data["score"],
            rationale=None if data["attribute"] is not None else data["rationale"],
            edited_ms=data["edited_ms"],
        )
    except AssignmentLocked as exc:
        return render(request, "annotation/_save_state.html", {"error": str(exc)}, status=409)
    except ValueError as exc:
        return render(request, "annotation/_save_state.html", {"error": str(exc)}, status=400)
    return render(request, "annotation/_save_state.html", {"result": result})


@require_POST
@role_required(CLINICIAN)
def submit(request: AuthenticatedHttpRequest, token: str) -> HttpResponse:
    assignment = assignment_get_for_user(user=request.user, token=token)
    if _is_labelling(assignment):
        try:
            label_assignment_submit(assignment=assignment, user=request.user)
        except AssignmentIncomplete as exc:
            missing = [what for _, names in exc.missing for what in names]
            context = _label_context(request, assignment, missing=missing)
            return render(request, "annotation/label.html", context, status=422)
        except AssignmentLocked as exc:
            messages.error(request, str(exc))
            return redirect("annotation:rate", token=token)
        messages.success(request, "Message labelled. Thank you.")
        return _to_next(request, after=assignment)
    try:
        assignment = assignment_submit(assignment=assignment, user=request.user)
    except AssignmentIncomplete as exc:
        context = _rating_context(request, assignment, missing=exc.missing)
        missing_by_item = dict(exc.missing)
        for item in context["page"].items:
            item.missing = missing_by_item.get(item.label, [])
        return render(request, "annotation/rate.html", context, status=422)
    except AssignmentLocked as exc:
        messages.error(request, str(exc))
        return redirect("annotation:rate", token=token)
    calibration_after_submit(assignment=assignment)
    if assignment.kind == assignment.Kind.PRACTICE:
        # Training: the clinician's scores beside the reference before the next conversation.
        return redirect("annotation:practice_feedback", token=token)
    messages.success(request, "Conversation submitted. Thank you.")
    return _to_next(request, after=assignment)


@require_POST
@role_required(CLINICIAN)
def flag(request: HttpRequest, token: str) -> HttpResponse:
    assignment = assignment_get_for_user(user=request.user, token=token)
    form = FlagForm(request.POST)
    if not form.is_valid():
        if _is_labelling(assignment):
            context = _label_context(request, assignment, flag_form=form)
            return render(request, "annotation/label.html", context, status=422)
        context = _rating_context(request, assignment, flag_form=form)
        return render(request, "annotation/rate.html", context, status=422)
    try:
        assignment_flag(assignment=assignment, reason=form.cleaned_data["reason"])
    except AssignmentLocked as exc:
        messages.error(request, str(exc))
        return redirect("annotation:rate", token=token)
    messages.success(request, "Conversation flagged; an admin will look at it.")
    return _to_next(request, after=assignment)


@require_POST
@role_required(CLINICIAN)
def unsafe(request: AuthenticatedHttpRequest, token: str) -> HttpResponse:
    """Mark one response of the task unsafe (with a reason), or withdraw the mark. From the
    page's script (HX-Request): the response's unsafe block again, with why when refused
    (400 bad input, 409 a task that takes no more edits). Without JavaScript: back to the
    page at that response, or the page again with why (400)."""
    assignment = assignment_get_for_user(user=request.user, token=token)
    form = UnsafeForm(request.POST)
    error, status = "", 200
    withdraw = form.is_valid() and form.cleaned_data["action"] == "withdraw"
    if not form.is_valid():
        error, status = "; ".join(str(e) for errs in form.errors.values() for e in errs), 400
    else:
        try:
            if withdraw:
                escalation_withdraw(
                    assignment=assignment, item_token=form.cleaned_data["item"], user=request.user
                )
            else:
                escalation_mark(
                    assignment=assignment,
                    item_token=form.cleaned_data["item"],
                    reason=form.cleaned_data["reason"],
                    user=request.user,
                )
        except AssignmentLocked as exc:
            error, status = str(exc), 409
        except ValueError as exc:
            error, status = str(exc), 400
    context = _rating_context(request, assignment)
    token_sent = form.cleaned_data.get("item") if form.is_valid() else None
    index, item = next(
        ((n, i) for n, i in enumerate(context["page"].items) if i.token == token_sent),
        (None, None),
    )
    if item is not None and error:
        item.unsafe_error = error
    if getattr(request, "htmx", False):
        if item is None:
            return render(request, "annotation/_save_state.html", {"error": error}, status=status)
        return render(
            request,
            "annotation/_unsafe.html",
            {
                **context,
                "item": item,
                "index": index,
                "editable": "" if context["page"].locked else "1",
                "draft": "" if withdraw else request.POST.get("reason", ""),
            },
            status=status,
        )
    if status == 409 or (item is None and error):
        messages.error(request, error)
        return redirect("annotation:rate", token=token)
    if error:
        context["draft"] = request.POST.get("reason", "")
        return render(request, "annotation/rate.html", context, status=status)
    messages.success(
        request,
        f"Response {item.label if item else ''}: "
        + (
            "the unsafe mark is withdrawn."
            if withdraw
            else "marked unsafe; it goes to the study's adjudicators and its lead is told."
        ),
    )
    return redirect(reverse("annotation:rate", kwargs={"token": token}) + f"#response-{index}")


@require_POST
@role_required(CLINICIAN)
def heartbeat(request: HttpRequest, token: str) -> HttpResponse:
    assignment = assignment_get_for_user(user=request.user, token=token)
    assignment_heartbeat(assignment=assignment)
    return HttpResponse(status=204)


def _to_next(request: HttpRequest, *, after) -> HttpResponse:
    """The next task, of the same kind as the one just finished where one is open: after a
    message is labelled, the next message to label, not a conversation of seventy scores."""
    following = next_assignment_for_user(user=request.user, kind=task_kind(assignment=after))
    if following is None:
        return redirect("annotation:queue")
    return redirect("annotation:rate", token=following.token)


@csrf_exempt  # the signed token is the secret; mail clients' one-click POST carries no cookie
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    """The link in every e-mail the platform sends: GET asks, POST stops the e-mail at once
    (also the one-click POST of RFC 8058 that mail clients send). No sign-in needed."""
    user_id = mail.unsubscribe_user_id(token=token)
    if user_id is None:
        return render(request, "annotation/unsubscribe.html", {"invalid": True}, status=404)
    if request.method == "POST":
        if not mail.unsubscribe(user_id=user_id):
            return render(request, "annotation/unsubscribe.html", {"invalid": True}, status=404)
        return render(request, "annotation/unsubscribe.html", {"done": True})
    if request.method != "GET":
        return HttpResponse(status=405, headers={"Allow": "GET, POST"})
    return render(request, "annotation/unsubscribe.html", {"token": token})


@role_required(CLINICIAN)
def consent_page(request: AuthenticatedHttpRequest, study_id: int) -> HttpResponse:
    """The study's consent text: accept it before the first rating, or withdraw."""
    study = get_object_or_404(Study, pk=study_id)
    rater = Rater.objects.filter(user=request.user).first()
    current = consent.consent_current(study_id=study.pk)
    if (
        rater is None
        or current is None
        or not rater.assignments.filter(conversation__study=study).exists()
    ):
        raise Http404("No consent to give here")
    if request.method == "POST":
        try:
            if request.POST.get("action") == "withdraw":
                record = consent.consent_withdraw(
                    study_id=study.pk, rater=rater, actor=request.user
                )
                messages.info(
                    request,
                    f"Your consent to {study.name} is withdrawn: it takes no more work from you"
                    + (
                        f", and your {record.ratings_removed} ratings were removed."
                        if record.ratings_removed
                        else "; what you rated so far stays, as its consent text says."
                    ),
                )
            else:
                consent.consent_accept(study_id=study.pk, rater=rater)
                messages.success(request, f"Thank you: your consent to {study.name} is recorded.")
        except consent.ConsentError as exc:
            messages.error(request, str(exc))
        return redirect("annotation:queue")
    accepted = ConsentRecord.objects.filter(consent_text=current, rater=rater).first()
    return render(
        request,
        "annotation/consent.html",
        {"study": study, "text": current, "accepted": accepted},
    )


@role_required(CLINICIAN)
def credentials(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The clinician's own credentials, which a release summarises without naming anyone."""
    rater = Rater.objects.filter(user=request.user).first()
    if rater is None:
        raise Http404("No clinician record for this account")
    instance = ClinicianCredentials.objects.filter(rater=rater).first()
    form = CredentialsForm(request.POST or None, instance=instance)
    if request.method == "POST" and form.is_valid():
        form.instance.rater = rater
        form.save()
        messages.success(request, "Your credentials are saved.")
        return redirect("annotation:queue")
    return render(request, "annotation/credentials.html", {"form": form})
