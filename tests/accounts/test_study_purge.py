"""Purging a study: everything recorded in it goes, in one transaction, children first; a second
study sharing the judge, the clinician and the responders keeps every row; a dry run deletes
nothing; the purge is recorded; afterwards no row anywhere points at what was deleted."""

from __future__ import annotations

import io
import os

import pytest
from django.apps import apps
from django.core.files.base import ContentFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import models

from accounts.models import StudyPurgeRecord
from accounts.services import StudyPurgeError, study_purge
from analysis.models import ExportLog, Job
from annotation.membership import LEAD, member_add
from annotation.models import (
    Assignment,
    AssignmentChange,
    AssignmentItem,
    ClinicianSample,
    ConsentRecord,
    ConsentText,
    Conversation,
    ImportLog,
    LabelAnnotation,
    LabelChange,
    MailSent,
    Rater,
    RaterCode,
    Rating,
    RatingChange,
    Responder,
    Response,
    Rubric,
    Score,
    Study,
    StudyMember,
    TrainingOutcome,
    Webhook,
)
from annotation.services import assignments_create
from judging.models import Run, RunItem
from tests.factories import RESPONDERS, clinician_make, endpoint_make, study_make, user_make


def _rate(rater, response, *, run=None, status="complete", source="judge"):
    rating = Rating.objects.create(
        rater=rater, response=response, run=run, status=status, source=source
    )
    for attribute in response.conversation.study.rubric.attributes.all():
        Score.objects.create(rating=rating, attribute=attribute, value=3)
    return rating


def _fill(study: Study, *, judge: Rater, clinician: Rater, endpoint, lead) -> None:
    """A judge run, the clinician's assignments, ratings and labels, consent, members, a
    sample, a job, an export, a study code, e-mail, a webhook, an import log."""
    run = Run.objects.create(study=study, endpoint=endpoint, rater=judge, kind="judge")
    assignments = assignments_create(study=study, clinicians=[clinician])
    responses = list(Response.objects.filter(conversation__study=study))
    for response in responses:
        RunItem.objects.create(run=run, response=response, status="done")
        _rate(judge, response, run=run)
        assignment = Assignment.objects.get(rater=clinician, conversation=response.conversation)
        rating = _rate(clinician, response, source="form")
        rating.assignment = assignment
        rating.save(update_fields=["assignment"])
        RatingChange.objects.create(rating=rating, field="rationale", new_value="why")
    for assignment in assignments:
        AssignmentChange.objects.create(assignment=assignment, field="status", new_value="x")
        annotation = LabelAnnotation.objects.create(
            rater=clinician, conversation=assignment.conversation, status="complete",
            source="form", labels=["Labeling"], assignment=assignment,
        )  # fmt: skip
        LabelChange.objects.create(annotation=annotation, field="labels", new_value="Labeling")
        LabelAnnotation.objects.create(
            rater=judge, conversation=assignment.conversation, run=run, status="complete",
            source="judge", labels=["Labeling"],
        )  # fmt: skip
    consent = ConsentText.objects.create(study=study, version=1, text="I agree.")
    ConsentRecord.objects.create(consent_text=consent, rater=clinician)
    member_add(study=study, user=lead, role=LEAD, site="North")
    sample = ClinicianSample.objects.create(
        study=study, method="uniform", size=1, population=2, seed=1
    )
    sample.conversations.set(study.conversations.all()[:1])
    TrainingOutcome.objects.create(study=study, rater=clinician, passed=True)
    Job.objects.create(kind="release", owner=lead, study=study, digest=f"d{study.pk}")
    ExportLog.objects.create(user=lead, study=study, channel="web", what="ratings-long")
    assert RaterCode.objects.filter(study=study, rater=clinician).exists()  # given on assignment
    MailSent.objects.create(user=clinician.user, kind="reminder", key=f"k{study.pk}", study=study)
    Webhook.objects.create(url="https://hooks.example/x", events=["run.finished"], study=study)
    ImportLog.objects.create(study=study, kind="conversations", file_name="f.csv", sha256="0")


def _rows_of(study: Study) -> dict[str, int]:
    """How many rows of each kind belong to `study`."""
    return {
        "conversations": Conversation.objects.filter(study=study).count(),
        "responses": Response.objects.filter(conversation__study=study).count(),
        "ratings": Rating.objects.filter(response__conversation__study=study).count(),
        "scores": Score.objects.filter(rating__response__conversation__study=study).count(),
        "rating changes": RatingChange.objects.filter(
            rating__response__conversation__study=study
        ).count(),
        "labels": LabelAnnotation.objects.filter(conversation__study=study).count(),
        "label changes": LabelChange.objects.filter(annotation__conversation__study=study).count(),
        "assignments": Assignment.objects.filter(conversation__study=study).count(),
        "items": AssignmentItem.objects.filter(assignment__conversation__study=study).count(),
        "assignment changes": AssignmentChange.objects.filter(
            assignment__conversation__study=study
        ).count(),
        "runs": Run.objects.filter(study=study).count(),
        "run items": RunItem.objects.filter(run__study=study).count(),
        "consent records": ConsentRecord.objects.filter(consent_text__study=study).count(),
        "members": StudyMember.objects.filter(study=study).count(),
        "samples": ClinicianSample.objects.filter(study=study).count(),
        "jobs": Job.objects.filter(study=study).count(),
        "exports": ExportLog.objects.filter(study=study).count(),
        "codes": RaterCode.objects.filter(study=study).count(),
        "mail": MailSent.objects.filter(study=study).count(),
        "training": TrainingOutcome.objects.filter(study=study).count(),
    }


@pytest.fixture
def two_studies(db):
    judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name="shared-judge")
    own_judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name="only-in-purged")
    clinician = clinician_make(username="dr_shared")
    lead = user_make(username="lead_pat")
    endpoint = endpoint_make(base_url="http://127.0.0.1:9/v1")
    doomed = study_make(name="Purge me", conversations=2, context=lambda c: f"PURGED-CONTEXT-{c}")
    kept = study_make(name="Keep me", conversations=2)  # the same responders
    _fill(doomed, judge=judge, clinician=clinician, endpoint=endpoint, lead=lead)
    _fill(kept, judge=judge, clinician=clinician, endpoint=endpoint, lead=lead)
    own_run = Run.objects.create(study=doomed, endpoint=endpoint, rater=own_judge, kind="judge")
    _rate(own_judge, Response.objects.filter(conversation__study=doomed).first(), run=own_run)
    return doomed, kept, judge, own_judge, clinician


def _references(model_ids: dict[type[models.Model], set[int]]) -> list[str]:
    """Every row, in every table (many-to-many tables included), whose foreign key points at
    one of `model_ids`."""
    found = []
    for model in apps.get_models(include_auto_created=True):
        for field in model._meta.concrete_fields:
            target = getattr(field, "related_model", None)
            if field.is_relation and target in model_ids and model_ids[target]:
                hits = model.objects.filter(**{f"{field.attname}__in": model_ids[target]})
                if hits.exists():
                    found.append(f"{model._meta.label}.{field.name}")
    return found


def test_a_purge_deletes_the_study_and_leaves_the_other_whole(two_studies):
    doomed, kept, judge, own_judge, clinician = two_studies
    kept_before = _rows_of(kept)
    doomed_before = _rows_of(doomed)
    assert all(doomed_before.values()) and all(kept_before.values())
    ids = {
        Study: {doomed.pk},
        Conversation: set(Conversation.objects.filter(study=doomed).values_list("pk", flat=True)),
        Response: set(
            Response.objects.filter(conversation__study=doomed).values_list("pk", flat=True)
        ),
        Assignment: set(
            Assignment.objects.filter(conversation__study=doomed).values_list("pk", flat=True)
        ),
        Run: set(Run.objects.filter(study=doomed).values_list("pk", flat=True)),
        ConsentText: set(ConsentText.objects.filter(study=doomed).values_list("pk", flat=True)),
    }
    responders, rubrics = Responder.objects.count(), Rubric.objects.count()

    purge = study_purge(name="Purge me", reason="ethics board 2027-4")

    assert not Study.objects.filter(pk=doomed.pk).exists()
    assert _references(ids) == []
    assert _rows_of(kept) == kept_before  # the other study: every row
    # The judge that rated elsewhere too, the clinician, responders and the rubric stay; the
    # judge that rated only in the purged study goes.
    assert Rater.objects.filter(pk__in=[judge.pk, clinician.pk]).count() == 2
    assert not Rater.objects.filter(pk=own_judge.pk).exists()
    assert Responder.objects.count() == responders == len(RESPONDERS)
    assert Rubric.objects.count() == rubrics
    # Recorded: name, number, counts.
    record = StudyPurgeRecord.objects.get()
    assert purge.record == record
    assert (record.study_id, record.study_name, record.reason) == (
        doomed.pk, "Purge me", "ethics board 2027-4",
    )  # fmt: skip
    assert record.removed["annotation.Study"] == 1
    assert record.removed["annotation.Conversation"] == doomed_before["conversations"]
    assert record.removed["annotation.Score"] == doomed_before["scores"]
    assert record.removed["judging.Run"] == 2 and record.removed["annotation.Rater"] == 1
    assert record.removed["annotation.ConsentRecord"] == 1
    # Who took which data out stays on record, no longer tied to the study.
    assert record.removed["analysis.ExportLog (kept, study cleared)"] == 1
    assert ExportLog.objects.filter(study=None, what="ratings-long").count() == 1
    # Nothing of it in a dump of the database but the record.
    out = io.StringIO()
    call_command("dumpdata", "--exclude", "accounts.StudyPurgeRecord", stdout=out)
    assert "PURGED-CONTEXT" not in out.getvalue() and "Purge me" not in out.getvalue()


def test_a_dry_run_deletes_nothing_and_says_what_would_go(two_studies, capsys):
    doomed, kept, *_ = two_studies
    before = (_rows_of(doomed), _rows_of(kept), Rater.objects.count())
    out = io.StringIO()
    call_command("purge_study", "Purge me", stdout=out)
    text = out.getvalue()
    assert f"Would delete study {doomed.pk} ('Purge me')" in text
    assert "annotation.Rating: " in text and "Nothing was deleted" in text
    assert (_rows_of(doomed), _rows_of(kept), Rater.objects.count()) == before
    assert not StudyPurgeRecord.objects.exists()

    out = io.StringIO()
    call_command("purge_study", "Purge me", "--yes", stdout=out)
    assert f"Deleted study {doomed.pk}" in out.getvalue()
    assert not Study.objects.filter(name="Purge me").exists()
    assert StudyPurgeRecord.objects.count() == 1


def test_an_unknown_study_is_a_clear_error(db):
    with pytest.raises(CommandError, match="no study named 'Nope'"):
        call_command("purge_study", "Nope", "--yes")
    with pytest.raises(StudyPurgeError):
        study_purge(name="Nope")


def test_a_purge_that_fails_leaves_the_study_whole(two_studies, monkeypatch):
    doomed, *_ = two_studies
    before = _rows_of(doomed)

    def refuse(*args, **kwargs):
        raise RuntimeError("the database went away")

    # The last step fails: everything deleted before it comes back.
    monkeypatch.setattr(StudyPurgeRecord.objects, "create", refuse)
    with pytest.raises(RuntimeError):
        study_purge(name="Purge me")
    assert _rows_of(doomed) == before


def test_a_jobs_files_go_only_once_the_purge_is_committed(
    two_studies, django_capture_on_commit_callbacks
):
    doomed, *_ = two_studies
    job = Job.objects.get(study=doomed)
    job.result_file.save("release.zip", ContentFile(b"zip"), save=True)
    path = job.result_file.path
    study_purge(name="Purge me", dry_run=True)
    assert os.path.exists(path)  # a dry run touches no file
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        study_purge(name="Purge me")
    assert len(callbacks) == 1 and not os.path.exists(path)
