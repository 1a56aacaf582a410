"""export_ratings: every complete score once, long and wide, streamed, audited, no partial file."""

from __future__ import annotations

import csv
import io

import pytest
from django.core.management import CommandError, call_command

from analysis import export
from analysis.models import ExportLog
from annotation.models import RaterCode

# Filters, exports and saves must work on every supported database: bin/test runs these on
# SQLite as well.
pytestmark = pytest.mark.portable


def _read(path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_long_export_has_one_row_per_complete_score(small_study, tmp_path):
    out = tmp_path / "scores.csv"
    call_command(
        "export_ratings", "--study", "Small study", "--out", str(out), stdout=io.StringIO()
    )
    rows = _read(out)
    assert list(rows[0]) == list(export.LONG_COLUMNS)
    assert len(rows) == small_study.n_complete_scores
    assert {r["conversation"] for r in rows} == {f"c{i}" for i in range(8)}  # no draft
    clinician = [r for r in rows if r["rater_kind"] == "clinician"]
    judge = [r for r in rows if r["rater_kind"] == "judge"]
    # Presentation position comes from the clinician's assignment; judges have none.
    assert all(r["position"].isdigit() for r in clinician)
    assert all(r["position"] == "" for r in judge)
    assert {r["responder_family"] for r in rows} >= {"fam-m1", "fam-original"}
    assert all(1 <= int(r["score"]) <= 5 and r["rationale"] == "why" for r in rows)
    log = ExportLog.objects.get()
    assert (log.channel, log.what, log.rows, log.user) == (
        "command",
        "ratings-long",
        len(rows),
        None,
    )


def test_wide_export_has_a_column_per_responder_and_attribute(small_study, tmp_path):
    out = tmp_path / "wide.csv"
    call_command(
        "export_ratings", "--study", "Small study", "--out", str(out), "--wide",
        stdout=io.StringIO(),
    )  # fmt: skip
    rows = _read(out)
    header = list(rows[0])
    assert header[:8] == list(export.WIDE_KEYS)
    assert "original_Guidance" in header and "m4_Understanding" in header
    # The scores, then (appended) each cell's final score and its provenance.
    assert len(header) == 8 + 3 * 5 * 7
    assert header[8 + 5 * 7] == "original_Guidance_final_score"
    assert header[-1] == "m4_Understanding_final_score_provenance"
    # 8 conversations × 2 judges + 12 clinician conversation ratings
    assert len(rows) == 8 * 2 + 4 * 2 + 4
    dr_b = RaterCode.objects.get(study=small_study.study, rater=small_study.clinicians[1]).code
    row = next(r for r in rows if r["conversation"] == "c0" and r["rater"] == dr_b)
    assert row["conditions"] == "depression;anxiety" and row["source"] == "A"
    assert all(row[c] for c in header[8 : 8 + 5 * 7])
    assert ExportLog.objects.get().what == "ratings-wide"


def test_the_generator_yields_in_chunks_without_building_the_whole_file(small_study):
    count = export.ExportCount()
    chunks = export.long_csv(study=small_study.study, count=count)
    first = next(chunks)
    assert first.startswith("study,conversation,") and first.count("\n") == 1
    assert count.rows == 0  # nothing but the header read yet
    sizes = [chunk.count("\n") for chunk in chunks]
    # CHUNK_ROWS rows per chunk at most, so memory is bounded by a chunk, not by the study.
    assert max(sizes) <= export.CHUNK_ROWS
    assert sum(sizes) == count.rows == small_study.n_complete_scores and count.done


def test_unknown_study_is_an_error_and_writes_nothing(db, tmp_path):
    out = tmp_path / "x.csv"
    with pytest.raises(CommandError, match=r"^no study named 'Nope'"):
        call_command("export_ratings", "--study", "Nope", "--out", str(out))
    assert list(tmp_path.iterdir()) == []
    assert not ExportLog.objects.exists()


def test_a_failed_export_leaves_no_partial_file(small_study, tmp_path, monkeypatch):
    def broken(**kwargs):
        yield "study,conversation\n"
        raise RuntimeError("database went away")

    monkeypatch.setattr("analysis.management.commands.export_ratings.long_csv", broken)
    out = tmp_path / "x.csv"
    with pytest.raises(RuntimeError):
        call_command("export_ratings", "--study", "Small study", "--out", str(out))
    assert list(tmp_path.iterdir()) == []
