import tempfile
from pathlib import Path

from django.contrib.admin.views.decorators import staff_member_required
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from .forms import ImportForm
from .importers.base import ImportProblem, file_sha256
from .importers.mentalalign import read_workbook
from .importers.mentalbench import read_conversations
from .services import (
    WorkbookSource,
    clinician_rater_get_or_create,
    conversations_import,
    judge_rater_get_or_create,
    mentalalign_import,
    study_get_or_create,
)


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
            or study_get_or_create(name=form.cleaned_data["new_study"])[0]
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
        rater = (
            clinician_rater_get_or_create(name="MentalAlign-70k clinicians")
            if kind == "human"
            else judge_rater_get_or_create(name=form.cleaned_data["judge_name"].strip())
        )
        (s,) = mentalalign_import(
            study=study,
            sources=[WorkbookSource(workbook=book, rater=rater, sha256=file_sha256(path))],
            user=user,
        )
    lines = [
        f"{s['cells']} cells: {s['stored']} stored, {s['invalid']} unparseable (raw text "
        f"kept, no scores), {s['empty']} empty, {s['already_present']} already imported"
    ]
    return study, lines, s["problems"]


@staff_member_required
def import_upload(request: HttpRequest) -> HttpResponse:
    context: dict = {}
    if request.method == "POST":
        form = ImportForm(request.POST, request.FILES)
        if form.is_valid():
            upload = form.cleaned_data["file"]
            suffix = Path(upload.name).suffix.lower()
            with tempfile.NamedTemporaryFile(suffix=suffix) as handle:
                for chunk in upload.chunks():
                    handle.write(chunk)
                handle.flush()
                try:
                    study, summary, problems = _run_import(form, Path(handle.name), request.user)
                except ImportProblem as exc:
                    form.add_error("file", str(exc).replace(handle.name, upload.name))
                else:
                    context.update(study=study, summary=summary, problems=problems)
    else:
        form = ImportForm(initial={"study": request.GET.get("study")})
    context["form"] = form
    return render(request, "annotation/import.html", context)
