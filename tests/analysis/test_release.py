"""release_study: a study published as a dataset that the importers read back whole.

The round trip (release → checksums → import_conversations + import_mentalalign into a fresh
study → reliability_report and judge_assisted) must give the same bytes, on a small generated
study and on the released MentalAlign-70k workbooks.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import openpyxl
import pandas as pd
import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from analysis.jobs.services import job_execute
from analysis.models import ExportLog, Job
from analysis.release import (
    ADJUDICATIONS,
    CHECKSUMS,
    CONVERSATIONS,
    DATASHEET,
    FINAL_SCORES,
    HUMAN,
    INVALID_SHEET,
    checksums_verify,
    parquet_available,
)
from annotation.models import Assignment, Conversation, Rater, Rating, Study
from annotation.services import rubric_get_or_create_default
from tests.conftest import require_shared


def _run(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue()


def _reports(study: str, judges: list[str]) -> dict[str, str]:
    return {
        "reliability": _run("reliability_report", "--study", study, "--format", "csv"),
        "reliability_two_stage": _run(
            "reliability_report", "--study", study, "--format", "csv", "--two-stage",
            "--bootstrap", "200",
        ),
        "as_published": _run(
            "reliability_report", "--study", study, "--format", "csv", "--as-published"
        ),
        "judge_assisted": _run(
            "judge_assisted", "--study", study, *(a for j in judges for a in ("--judge", j)),
            "--format", "csv",
        ),
    }  # fmt: skip


def _reimport(directory: Path, study: str, exclusions: dict[str, str]) -> str:
    """The commands the datasheet prints, into a new study."""
    _run("import_conversations", "--study", study, str(directory / CONVERSATIONS))
    args = ["import_mentalalign", "--study", study]
    if (directory / HUMAN).exists():
        args += ["--human", str(directory / HUMAN)]
    for path in sorted(directory.glob("*_llm_judge.xlsx")):
        judge = path.name.removesuffix("_llm_judge.xlsx")
        args += ["--judge", f"{judge}={path}"]
        args += ["--exclude", f"{judge}={exclusions.get(judge, '')}"]
    return _run(*args)


def _release_text(directory: Path) -> str:
    """Every file of the release as text: workbooks unzipped (their XML), the rest decoded."""
    parts = []
    for path in sorted(directory.iterdir()):
        if path.suffix == ".xlsx":
            with zipfile.ZipFile(path) as book:
                parts += [book.read(n).decode("utf-8", "replace") for n in book.namelist()]
        else:
            parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


@pytest.fixture
def generated(small_study):
    """The small study, plus what a release must handle: e-mail addresses, a flagged
    conversation, a context a spreadsheet would run as a formula, a draft."""
    study = small_study.study
    for rater in small_study.clinicians:
        rater.user.email = f"{rater.user.username}@clinic.example"
        rater.user.save(update_fields=["email"])
    Conversation.objects.filter(study=study, external_id="c0").update(
        context='=HYPERLINK("http://evil.example","click") I feel worried.'
    )
    # A spreadsheet's error value, which openpyxl would otherwise store as an error, not text.
    Conversation.objects.filter(study=study, external_id="c2").update(context="#N/A")
    flagged = Conversation.objects.create(study=study, external_id="c-flag", context="Too hard.")
    for responder_response in Conversation.objects.get(
        study=study, external_id="c1"
    ).responses.all():
        flagged.responses.create(responder=responder_response.responder, text="A reply.")
    Assignment.objects.create(
        rater=small_study.clinicians[1], conversation=flagged, status="flagged",
        flag_reason="dr_b finds this distressing",
    )  # fmt: skip
    return small_study


def test_generated_study_comes_back_byte_for_byte(generated, tmp_path):
    study = generated.study
    # A judge named like one of the paper's, compared on every responder: the import would
    # give it the paper's self-exclusion unless told otherwise (--exclude NAME=).
    Rater.objects.filter(name="judge-y").update(name="judge-y-gpt-4o")
    out = tmp_path / "release"
    _run("release_study", "--study", study.name, "--out", str(out))
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(
        [CONVERSATIONS, HUMAN, "judge-x_llm_judge.xlsx", "judge-y-gpt-4o_llm_judge.xlsx",
         FINAL_SCORES, ADJUDICATIONS, DATASHEET, CHECKSUMS]
    )  # fmt: skip
    assert checksums_verify(out) == []
    sheet = (out / DATASHEET).read_text(encoding="utf-8")
    # 8 conversations rated by dr_a, 4 of them by dr_b too, 5 responses each.
    assert "- 60 clinician ratings were made on this platform" in sheet
    assert "imported from files" not in sheet

    before = _reports(study.name, ["judge-x", "judge-y-gpt-4o"])
    summary = _reimport(out, "Small study, re-imported", {"judge-x": "m1"})
    assert "marked flagged" in summary
    after = _reports("Small study, re-imported", ["judge-x", "judge-y-gpt-4o"])
    assert after == before
    assert Rater.objects.get(name="judge-y-gpt-4o").excluded_responders == []

    again = Study.objects.get(name="Small study, re-imported")
    clinicians = Rater.objects.filter(ratings__response__conversation__study=again).distinct()
    assert sorted(clinicians.filter(kind="clinician").values_list("name", flat=True)) == [
        "Small study, re-imported C01",
        "Small study, re-imported C02",
    ]
    # The flagged conversation and the marked cells store nothing; the draft is not released.
    assert not Rating.objects.filter(
        response__conversation__study=again, response__conversation__external_id="c-flag"
    ).exists()
    assert not Rating.objects.filter(
        response__conversation__study=again, rater__kind="clinician",
        response__conversation__external_id="draft",
    ).exists()  # fmt: skip
    # Texts and contexts come back exactly, the formula-looking one included.
    original = dict(Conversation.objects.filter(study=study).values_list("external_id", "context"))
    copied = dict(Conversation.objects.filter(study=again).values_list("external_id", "context"))
    assert copied == original


def test_release_is_pseudonymous(generated, tmp_path):
    out = tmp_path / "release"
    _run("release_study", "--study", generated.study.name, "--out", str(out))
    text = _release_text(out)
    users = get_user_model().objects.filter(rater__in=generated.clinicians)
    for username, email in users.values_list("username", "email"):
        assert username not in text
        assert email not in text
    assert "distressing" not in text  # a flag reason is the clinician's own words about them
    # No timestamps: no date of any kind (the workbooks' own metadata is written without one).
    assert not re.search(r"\b20\d\d-\d\d-\d\d", text)
    book = openpyxl.load_workbook(out / HUMAN, read_only=True)
    header, *rows = book.worksheets[0].iter_rows(values_only=True)
    assert header[:3] == ("ConvID", "Clinician", "context")
    assert {r[1] for r in rows} == {"C01", "C02"}
    flagged = [r for r in rows if r[0] == "c-flag"]
    assert len(flagged) == 1 and set(flagged[0][3:]) == {"[flagged]"}


def test_formula_looking_cells_are_text_in_every_file(generated, tmp_path):
    out = tmp_path / "release"
    _run("release_study", "--study", generated.study.name, "--out", str(out))
    lines = (out / CONVERSATIONS).read_text(encoding="utf-8").splitlines()
    assert any(line.startswith("c0,\"'=HYPERLINK(") for line in lines)
    book = openpyxl.load_workbook(out / HUMAN)  # not read-only: cell types are kept
    cells = [c for row in book.worksheets[0].iter_rows() for c in row]
    formula = [c for c in cells if isinstance(c.value, str) and c.value.startswith("=")]
    assert formula and all(c.data_type == "s" for c in formula)
    error_value = [c for c in cells if c.value == "#N/A"]
    assert error_value and all(c.data_type == "s" for c in error_value)


def test_judge_workbook_keeps_invalid_outputs_with_their_reasons(generated, tmp_path):
    Rating.objects.filter(raw_output="oops").update(error="no JSON object with the scores found")
    out = tmp_path / "release"
    _run("release_study", "--study", generated.study.name, "--out", str(out))
    book = openpyxl.load_workbook(out / "judge-x_llm_judge.xlsx", read_only=True)
    cells = [v for row in book.worksheets[0].iter_rows(values_only=True) for v in row]
    assert "oops" in cells
    reasons = list(book[INVALID_SHEET].iter_rows(values_only=True))
    assert reasons == [
        ("ConvID", "column", "reason"),
        ("draft", "judge_response_m1", "no JSON object with the scores found"),
    ]


def test_a_stored_rating_its_raw_output_would_not_give_back_is_refused(generated, tmp_path):
    rating = Rating.objects.filter(rater__name="judge-y", status="complete").first()
    rating.raw_output = '{"Guidance": 5}'  # the stored scores are of every attribute
    rating.save(update_fields=["raw_output"])
    out = tmp_path / "release"
    with pytest.raises(CommandError, match=r"judge 'judge-y', conversation '.*': the stored"):
        _run("release_study", "--study", generated.study.name, "--out", str(out))
    assert list(tmp_path.iterdir()) == []  # nothing half-written, no staging left behind


def test_a_distortion_study_is_refused_rather_than_released_without_its_labels(db, tmp_path):
    study = Study.objects.create(
        name="Distortions", kind="distortion", rubric=rubric_get_or_create_default()
    )
    Conversation.objects.create(study=study, external_id="1", context="I always fail.")
    with pytest.raises(CommandError, match="distortion-labelling study"):
        _run("release_study", "--study", "Distortions", "--out", str(tmp_path / "r"))
    assert list(tmp_path.iterdir()) == []


def test_a_release_the_importer_would_refuse_is_not_written(generated, tmp_path, settings):
    settings.IMPORT_MAX_CELLS = 100  # conversations.csv: 11 rows × 11 columns
    with pytest.raises(
        CommandError, match=r"conversations.csv, row 11: .*IMPORT_MAX_CELLS.*refuse"
    ):
        _run("release_study", "--study", generated.study.name, "--out", str(tmp_path / "r"))
    assert list(tmp_path.iterdir()) == []


def test_out_must_be_new_or_empty(generated, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(CommandError, match="exists and is not an empty directory"):
        _run("release_study", "--study", generated.study.name, "--out", str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_no_text_leaves_response_texts_out(generated, tmp_path):
    out = tmp_path / "release"
    _run("release_study", "--study", generated.study.name, "--out", str(out), "--no-text")
    header = (out / CONVERSATIONS).read_text(encoding="utf-8").splitlines()[0]
    assert header == "id,context,condition_1,condition_2,condition_3,source"
    assert "suggests a walk" not in _release_text(out)


def test_parquet_needs_pyarrow_or_writes_the_long_table(generated, tmp_path):
    out = tmp_path / "release"
    args = ["release_study", "--study", generated.study.name, "--out", str(out)]
    if not parquet_available():
        with pytest.raises(CommandError, match="needs the pyarrow package"):
            _run(*args, "--format", "parquet")
        assert not out.exists()
        return
    import pandas as pd

    _run(*args, "--format", "parquet")
    assert len(pd.read_parquet(out / "ratings.parquet")) == generated.n_complete_scores
    assert checksums_verify(out) == []


def test_release_is_logged(generated, tmp_path):
    _run("release_study", "--study", generated.study.name, "--out", str(tmp_path / "r"))
    log = ExportLog.objects.get(what="release")
    assert log.channel == "command" and log.study == generated.study and log.rows == 10


# --- the page and the download ------------------------------------------------------------------


def _prepare(client, study, text: str = "1") -> None:
    """Start the release job from the page and run it, as a worker would."""
    response = client.post(reverse("analysis:release_start", args=[study.pk]), {"text": text})
    assert response.status_code == 302
    job_execute(job_id=str(Job.objects.latest("created_at").pk))


def test_researcher_prepares_the_zip_as_a_job_then_reads_its_datasheet(
    client, researcher, generated
):
    """The page builds nothing (a large study's release takes minutes): it starts the job,
    whose page links back to the datasheet the job found."""
    client.force_login(researcher)
    url = reverse("analysis:release", args=[generated.study.pk])
    html = client.get(url).content.decode()
    assert 'id="datasheet-pending"' in html and 'id="datasheet"' not in html
    assert reverse("analysis:release_start", args=[generated.study.pk]) in html
    response = client.post(reverse("analysis:release_start", args=[generated.study.pk]))
    job = Job.objects.get()
    assert response["Location"] == reverse("analysis:job", args=[job.pk])
    assert job.kind == Job.Kind.RELEASE and job.study == generated.study
    job_execute(job_id=str(job.pk))
    assert url in client.get(response["Location"]).content.decode()
    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert "<h3>Reliability</h3>" in html and "<th>icc_c1</th>" in html
    assert "Licence" in html and "dr_a" not in html
    # Without the texts it is another release, not prepared yet.
    assert 'id="datasheet-pending"' in client.get(url + "?text=0").content.decode()


def test_the_page_shows_the_datasheet_of_the_study_as_it_is_now(client, researcher, generated):
    """The datasheet is kept with the study's version: after a new description (an admin's edit,
    no rating changed) the page waits for a release of the study as it now is."""
    client.force_login(researcher)
    url = reverse("analysis:release", args=[generated.study.pk])
    _prepare(client, generated.study)
    assert "A new description." not in client.get(url).content.decode()
    generated.study.description = "A new description."
    generated.study.save()
    assert 'id="datasheet-pending"' in client.get(url).content.decode()
    _prepare(client, generated.study)
    assert "A new description." in client.get(url).content.decode()


def test_clinician_can_neither_read_nor_download_the_release(client, clinician_user, generated):
    client.force_login(clinician_user)
    pk = generated.study.pk
    assert client.get(reverse("analysis:release", args=[pk])).status_code == 403
    assert client.post(reverse("analysis:release_start", args=[pk])).status_code == 403
    assert not ExportLog.objects.exists() and not Job.objects.exists()


def test_a_study_that_cannot_be_released_says_why_on_the_page(client, researcher, generated):
    Conversation.objects.filter(study=generated.study, external_id="c1").update(
        conditions=["a", "b", "c", "d"]
    )
    client.force_login(researcher)
    _prepare(client, generated.study)
    page = client.get(reverse("analysis:release", args=[generated.study.pk]))
    assert page.status_code == 409
    assert "conversation &#x27;c1&#x27; has 4 condition labels" in page.content.decode()
    assert "Prepare the release" not in page.content.decode()


# --- the released MentalAlign-70k workbooks ------------------------------------------------------


@pytest.mark.shared_data
@pytest.mark.slow
def test_mentalalign70k_comes_back_byte_for_byte(db, tmp_path):
    data = require_shared()
    _run(
        "import_mentalalign", "--study", "MA-70k", "--human", str(data / "Human_judge.xlsx"),
        "--judge", f"claude={data / 'claude_llm_judge.xlsx'}",
        "--judge", f"gpt-4o={data / 'gpt-4o_llm_judge.xlsx'}",
    )  # fmt: skip
    out = tmp_path / "release"
    _run("release_study", "--study", "MA-70k", "--out", str(out))
    assert checksums_verify(out) == []
    before = _reports("MA-70k", ["claude", "gpt-4o"])
    summary = _reimport(out, "MA-70k again", {"claude": "claude", "gpt-4o": "gpt4o"})
    # The 43 unusable clinician cells come back as invalid (raw kept), the 57 empty ones as
    # marked "not rated": never as scores.
    assert "9900 stored + 43 unparseable" in summary and "57 marked not rated" in summary
    after = _reports("MA-70k again", ["claude", "gpt-4o"])
    assert after == before
    sheet = (out / DATASHEET).read_text(encoding="utf-8")
    assert (
        "| claude | claude |" in sheet and "| clinician ratings, valid (scored) | 9900 |" in sheet
    )


def test_the_clinician_sample_is_released_and_reproduces_the_judge_assisted_estimates(
    generated, tmp_path
):
    """A study whose judge-assisted estimates use a stored clinician sample releases the
    sample; --labelled with that file on the re-imported study gives the same estimates."""
    from analysis.release import SAMPLE
    from annotation.services.sampling import clinician_sample_draw

    study = generated.study
    sample = clinician_sample_draw(study=study, size=4, seed=21)
    out = tmp_path / "release"
    _run("release_study", "--study", study.name, "--out", str(out))
    assert checksums_verify(out) == []
    listed = (out / SAMPLE).read_text(encoding="utf-8").split()
    assert sorted(listed) == sorted(sample.conversations.values_list("external_id", flat=True))
    sheet = (out / DATASHEET).read_text(encoding="utf-8")
    assert "4 of 10 conversations, uniform random conversations, seed 21" in sheet
    judges = ("--judge", "judge-x", "--judge", "judge-y")
    before = _run("judge_assisted", "--study", study.name, *judges, "--format", "csv")
    _reimport(out, "Small study, sampled", {"judge-x": "m1"})
    after = _run(
        "judge_assisted", "--study", "Small study, sampled", *judges, "--format", "csv",
        "--labelled", str(out / SAMPLE),
    )  # fmt: skip
    # The same numbers; the design column names the sample on one side, the listed file on the
    # other.
    first, second = (pd.read_csv(io.StringIO(text)) for text in (before, after))
    assert set(first["design"]) == {sample.describe()}
    assert set(second["design"]) == {"4 listed conversations"}
    pd.testing.assert_frame_equal(first.drop(columns="design"), second.drop(columns="design"))
    without = _run("judge_assisted", "--study", "Small study, sampled", *judges, "--format", "csv")
    third = pd.read_csv(io.StringIO(without)).drop(columns="design")
    assert not third.equals(first.drop(columns="design"))  # the design matters
