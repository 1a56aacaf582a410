"""From a CSV of user messages to consensus labels, kappa tables and κ_F1 through the web UI
only: import → assign → clinicians label → labelling run ×5 → dashboard
→ export with split → κ_F1 upload. The run's Celery task is stood in for by run_work (the work
loop the task calls), against the fake OpenAI server over real HTTP."""

from __future__ import annotations

import csv
import io
import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from accounts.roles import ADMIN, CLINICIAN, RESEARCHER, role_add
from analysis.jobs.services import job_execute
from analysis.models import ExportLog, Job
from annotation.models import Assignment, LabelAnnotation, Rater, Study
from judging import services
from judging.models import Run
from tests.fakes.llm_server import scenario


def _script(*answers: str) -> str:
    entries = "|".join(a.replace(" ", "_") for a in answers)
    return scenario("labels", key=uuid.uuid4().hex[:10], script=entries)


@pytest.mark.django_db
def test_csv_of_messages_to_consensus_kappa_and_kappa_f1_in_the_web_ui(
    client, django_user_model, endpoint_factory, django_capture_on_commit_callbacks
):
    boss = django_user_model.objects.create_user("boss", password="pw", is_staff=True)
    role_add(user=boss, role=ADMIN)
    role_add(user=boss, role=RESEARCHER)
    nurse = django_user_model.objects.create_user("nurse", password="pw")
    role_add(user=nurse, role=CLINICIAN)
    Rater.objects.create(kind="clinician", name="nurse", user=nurse)
    endpoint = endpoint_factory()

    scripts = [
        _script("Overgeneralization", "Overgeneralization", "Overgeneralization, Labeling",
                "Overgeneralization", "Labeling"),
        _script("No Distortion"),
        _script("Mind Reading", "Labeling", "No Distortion", "Self-Blame", "Mental Filter"),
        _script("Labeling, Self-Blame", "Labeling", "Labeling", "Labeling", "Mind Reading"),
    ]  # fmt: skip
    rows = "".join(f'u{i},"I never get anything right. {s}"\n' for i, s in enumerate(scripts))
    upload = SimpleUploadedFile("messages.csv", ("id,context\n" + rows).encode(), "text/csv")

    # 1. The admin creates a distortion study by importing the CSV.
    client.force_login(boss)
    response = client.post(
        "/imports/",
        {
            "new_study": "CD end to end",
            "new_study_kind": "distortion",
            "label_scheme": "ranked",
            "kind": "conversations",
            "file": upload,
        },
    )
    assert response.status_code == 200
    study = Study.objects.get(name="CD end to end")
    assert study.kind == "distortion" and study.conversations.count() == 4

    # 2. … assigns every message to the clinician.
    clinician = Rater.objects.get(name="nurse")
    response = client.post(
        reverse("annotation:manage_assign"),
        {"study": study.pk, "clinicians": [clinician.pk], "overlap": 1, "overlap_percent": 0},
    )
    assert response.status_code == 302
    assignments = list(Assignment.objects.filter(rater=clinician).order_by("conversation_id"))
    assert len(assignments) == 4

    # 3. The clinician labels every message in the browser's forms.
    client.force_login(nurse)
    chosen = ["Overgeneralization", "No Distortion", "Mind Reading", "Labeling"]
    for assignment, dominant in zip(assignments, chosen, strict=True):
        save = reverse("annotation:save_labels", args=[assignment.token])
        assert client.post(save, {"dominant": dominant, "edited_ms": 1}).status_code == 200
        assert client.post(reverse("annotation:submit", args=[assignment.token])).status_code == 302

    # 4. The admin launches a labelling run ×5 (the form's defaults) …
    client.force_login(boss)
    data = {
        "study": study.pk,
        "endpoint": endpoint.pk,
        "subset": "all",
        "sample_seed": 0,
        "repeats": 5,
        "temperature": 0.7,
        "max_tokens": 256,
        "max_output_attempts": 3,
        "concurrency": 8,
        "parallel_tasks": 1,
        "confirm_cost": "on",
    }
    with django_capture_on_commit_callbacks(execute=False):
        assert client.post(reverse("judging:labelling_new"), data).status_code == 302
    run = Run.objects.get(study=study)
    services.run_work(run_id=run.pk)  # what the enqueued Celery task does
    run.refresh_from_db()
    assert run.status == "done"
    assert client.get(reverse("judging:run", args=[run.pk])).status_code == 200
    assert "Distortion labelling" in client.get(reverse("judging:runs")).content.decode()
    assert LabelAnnotation.objects.filter(run=run, status="complete").count() == 20

    # 5. … and reads consensus labels, kappa tables and agreement on the dashboard.
    page = client.get(reverse("analysis:distortions", args=[study.pk])).content.decode()
    for text in ("Figure 2", "Fleiss", "Table 8", "C01", "Self-Blame"):
        assert text in page, text
    assert "nurse" not in page  # the clinician appears as the study's code, never by name
    export = client.get(reverse("analysis:distortion_labels_csv", args=[study.pk, run.pk]))
    rows = list(csv.DictReader(io.StringIO(export.content.decode())))
    assert [r["labels"] for r in rows] == [
        "Overgeneralization",
        "No Distortion",
        "not sure if distortion",
        "Labeling",
    ]
    assert all(r["split"] in ("train", "dev", "test") for r in rows)
    assert ExportLog.objects.filter(study=study, what="distortion-labels").exists()

    # 6. Finally κ_F1 for a classifier trained on those labels.
    predictions = b"true,predicted\nLabeling,Labeling\nNo Distortion,Labeling\n" + (
        b"Labeling,Labeling\nNo Distortion,No Distortion\n"
    )
    response = client.post(
        reverse("analysis:kappa_f1"),
        {"file": SimpleUploadedFile("p.csv", predictions), "n_sim": 100, "seed": 0},
    )
    # A background job computes it; here the test runs it, as a worker would.
    job_execute(job_id=str(Job.objects.get(kind=Job.Kind.KAPPA_F1).pk))
    html = client.get(response["Location"]).content.decode()
    # p = (0.5, 0.5): F1_random = 0.5; weighted F1 = 0.5·0.8 + 0.5·(2/3) = 0.733; κ_F1 = 0.467.
    assert 'id="kappa-f1-result"' in html
    assert "0.500" in html and "0.733" in html and "0.467" in html
