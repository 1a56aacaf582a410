"""Distortion dashboard, table and label exports, κ_F1 upload, over HTTP."""

from __future__ import annotations

import csv
import io

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from analysis.distortion_selectors import distortion_report
from analysis.distortions.consistency import per_label_fleiss
from analysis.distortions.splits import stratified_split
from analysis.models import ExportLog, Job
from annotation.models import LabelAnnotation, Rater, RaterCode
from annotation.rater_codes import rater_codes_assign
from tests.factories import DISTORTION_CLINICIAN_LABELS, DISTORTION_RUNS

RUNS, CLINICIAN = DISTORTION_RUNS, DISTORTION_CLINICIAN_LABELS


def test_report_feeds_the_pure_functions_with_runs_in_repeat_order(cd_study):
    study, run = cd_study
    report = distortion_report(study=study)
    (config,) = report.configurations
    assert config.runs_by_item == list(RUNS.values())
    assert [c.rule for c in config.consensus] == [
        "threshold",
        "threshold",
        "not sure if distortion",
        "not sure which distortion",
        "threshold",
    ]
    assert [c.labels for c in config.consensus][4] == ["Labeling"]  # "Others" dropped beside it
    expected = per_label_fleiss(list(RUNS.values()), labels=report.labels)
    assert config.fleiss.average == pytest.approx(expected.average, abs=1e-12)
    assert config.others_verbatim == {"Self-Blame": 2}


def test_clinician_is_forbidden(client, cd_study, clinician_user):
    study, _ = cd_study
    client.force_login(clinician_user)
    assert client.get(reverse("analysis:distortions", args=[study.pk])).status_code == 403
    assert client.get(reverse("analysis:kappa_f1")).status_code == 403


def test_dashboard_shows_figure2_kappa_consensus_distribution_and_agreement(
    client, researcher, cd_study, django_assert_max_num_queries
):
    study, run = cd_study
    client.force_login(researcher)
    # 20 for the page, and the sign-in rules' one write of the idle clock into a fresh session
    # (accounts.middleware: at most once a minute).
    # 22: the second factor's gate asks whether the account has an authenticator (accounts).
    # 24: the clinicians' gold label: their labels and the adjudications (docs/distortions.md).
    with django_assert_max_num_queries(24):
        response = client.get(reverse("analysis:distortions", args=[study.pk]))
    html = response.content.decode()
    assert response.status_code == 200
    for text in (
        "Figure 2",
        "Tables 2 and 7",
        "Final labels per message",
        "Table 8",
        "Agreement of the final labels with each clinician",
        "not sure which distortion",
        "C01",  # dr-who, the study's only clinician, by code
        "Self-Blame",
        "spec-figure2",
    ):
        assert text in html, text
    assert "dr-who" not in html


def test_k_control_changes_the_consensus(client, researcher, cd_study):
    study, _ = cd_study
    client.force_login(researcher)
    url = reverse("analysis:distortion_table_csv", args=[study.pk, "consensus"])
    strict = list(csv.DictReader(io.StringIO(client.get(url, {"k": 5}).content.decode())))
    loose = list(csv.DictReader(io.StringIO(client.get(url, {"k": 3}).content.decode())))
    column = next(c for c in strict[0] if c.endswith(": rule"))
    assert strict[0][column] == "not sure which distortion"  # m0: Labeling in 4 of 5 < 5
    assert loose[0][column] == "threshold"


def test_label_export_has_a_stratified_split_column_and_is_logged(client, researcher, cd_study):
    study, run = cd_study
    client.force_login(researcher)
    url = reverse("analysis:distortion_labels_csv", args=[study.pk, run.pk])
    response = client.get(url, {"seed": 3})
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [r["item"] for r in rows] == list(RUNS)
    assert {r["split"] for r in rows} <= {"train", "dev", "test"}
    finals = [c.labels for c in distortion_report(study=study).configurations[0].consensus]
    assert [r["split"] for r in rows] == stratified_split(finals, seed=3)
    assert rows[3]["ambiguous"] == "1" and rows[0]["dominant"] == "Labeling"
    log = ExportLog.objects.get(what="distortion-labels")
    assert log.rows == 5 and log.study == study and log.user == researcher


def test_table_downloads_are_logged(client, researcher, cd_study):
    study, _ = cd_study
    client.force_login(researcher)
    for name in ("repetition", "fleiss", "distribution", "agreement", "agreement_labels"):
        response = client.get(reverse("analysis:distortion_table_csv", args=[study.pk, name]))
        assert response.status_code == 200 and response.content
    assert ExportLog.objects.filter(what__startswith="distortion-table:").count() == 5


def test_kappa_f1_upload_starts_a_job(client, researcher):
    """The numbers are on the job's page (tests/analysis/test_jobs.py runs the job)."""
    client.force_login(researcher)
    data = b"true,predicted\na,a\na,a\na,b\nb,b\n"
    response = client.post(
        reverse("analysis:kappa_f1"),
        {
            "file": SimpleUploadedFile("preds.csv", data, content_type="text/csv"),
            "kind": "",
            "n_sim": 200,
            "seed": 1,
        },
    )
    job = Job.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("analysis:job", args=[job.pk])
    assert job.params == {
        "kind": None, "labels": None, "n_sim": 200, "seed": 1, "file_name": "preds.csv"
    }  # fmt: skip


def _token_client(user):
    from knox.models import AuthToken
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=user)[1]}")
    return client


def test_api_lists_label_annotations_of_runs_and_clinicians(
    cd_study, researcher, staff_user, django_assert_max_num_queries
):
    study, run = cd_study
    conversation = study.conversations.get(external_id="m2")
    draft_rater = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="dr-draft")
    LabelAnnotation.objects.create(
        rater=draft_rater, conversation=conversation, status="draft", source="form"
    )
    api = _token_client(researcher)
    rater_codes_assign(study_id=study.pk, rater_ids=[draft_rater.pk])  # as their assignment does
    with django_assert_max_num_queries(7):
        body = api.get("/api/label-annotations/", {"study": study.pk, "limit": 100}).json()
    # 5 messages × 5 runs + 3 clinician labels; the draft only on request.
    assert body["count"] == 28
    first = body["results"][0]
    assert first["rater"] == "fake-cd" and first["rater_kind"] == "judge"
    assert (first["conversation"], first["run"], first["repeat"]) == ("m0", run.pk, 0)
    assert first["labels"] == ["Labeling"] and first["status"] == "complete"
    m4 = [r for r in body["results"] if r["conversation"] == "m4" and r["repeat"] == 0][0]
    assert m4["labels"] == ["Others", "Labeling"] and m4["others"] == ["Self-Blame"]
    dr_who = RaterCode.objects.get(study=study, rater__name="dr-who").code
    clinician = api.get("/api/label-annotations/", {"rater": dr_who}).json()
    assert [r["labels"] for r in clinician["results"]] == list(CLINICIAN.values())
    assert {r["rater"] for r in clinician["results"]} == {dr_who}
    # Researchers get no drafts and no names; an admin asks explicitly, and it is audited.
    assert api.get("/api/label-annotations/", {"status": "draft"}).status_code == 403
    assert api.get("/api/label-annotations/", {"rater": "dr-who"}).json()["count"] == 0
    admin = _token_client(staff_user)
    drafts = admin.get("/api/label-annotations/", {"status": "draft", "identified": 1}).json()
    assert [r["rater"] for r in drafts["results"]] == ["dr-draft"]
    assert ExportLog.objects.get(what="api:label-annotations").user == staff_user


def test_api_label_annotations_refuse_clinicians_and_bad_filters(
    cd_study, researcher, clinician_user
):
    assert _token_client(clinician_user).get("/api/label-annotations/").status_code == 403
    api = _token_client(researcher)
    response = api.get("/api/label-annotations/", {"study": "x"})
    assert response.status_code == 400
    assert response.json() == {"study": ["must be a whole number, got 'x'"]}
    response = api.get("/api/label-annotations/", {"status": "finished"})
    assert response.status_code == 400
    assert response.json() == {
        "status": ["must be one of draft, complete, invalid, got 'finished'"]
    }
