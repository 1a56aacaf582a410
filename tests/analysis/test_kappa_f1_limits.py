"""The κ_F1 upload's limits: size before parsing, rows and distinct labels while reading, and
memory that grows linearly with the file."""

from __future__ import annotations

import html as html_lib
import time
import tracemalloc

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from django.urls import reverse

from analysis.distortions.evaluation import kappa_f1_report
from analysis.jobs.services import job_execute
from analysis.models import Job


def post(client, data: bytes, n_sim: int = 10) -> str:
    """The text a person reads after uploading `data` as preds.csv: the form again when it was
    refused, else the page of its job, run here to its end (the worker's part)."""
    response = client.post(
        reverse("analysis:kappa_f1"),
        {
            "file": SimpleUploadedFile("preds.csv", data, content_type="text/csv"),
            "kind": "",
            "n_sim": n_sim,
            "seed": 0,
        },
    )
    if response.status_code == 302:
        job_execute(job_id=str(Job.objects.latest("created_at").pk))
        response = client.get(response["Location"])
    return html_lib.unescape(response.content.decode())


def many_labels_csv(rows: int) -> bytes:
    """Every line brings new labels: the shape that asked for 1.5 GB for a 91 KB file."""
    lines = ["true,predicted"]
    lines += [f"t{i};u{i},p{i};q{i}" for i in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def test_a_file_with_thousands_of_distinct_labels_is_refused_while_reading(client, researcher):
    client.force_login(researcher)
    data = many_labels_csv(4000)
    tracemalloc.start()
    started = time.perf_counter()
    html = post(client, data)
    elapsed = time.perf_counter() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert (
        "preds.csv: line 14, column 'predicted': more than 50 distinct labels, the most one "
        "file may have" in html
    )
    assert 'id="kappa-f1-result"' not in html
    assert peak < 20 * 1024 * 1024 and elapsed < 10, (peak, elapsed)


@override_settings(KAPPA_F1_MAX_FILE_BYTES=100)
def test_a_file_over_the_size_limit_is_refused_before_it_is_parsed(client, researcher):
    client.force_login(researcher)
    # Not even a CSV: the size alone refuses it, so no parse error can be the reason.
    html = post(client, b"\x00" * 101)
    assert "preds.csv: 101 bytes, more than the 100 a predictions file may have" in html
    assert "missing column" not in html and 'id="kappa-f1-result"' not in html


@override_settings(KAPPA_F1_MAX_ROWS=3)
def test_a_file_over_the_row_limit_is_refused(client, researcher):
    client.force_login(researcher)
    html = post(client, b"true,predicted\na,a\na,b\nb,b\na,a\n")
    assert "preds.csv: line 5: more than 3 data rows, the most one file may have" in html
    assert 'id="kappa-f1-result"' not in html


def test_the_limits_are_documented(settings):
    from pathlib import Path

    doc = (Path(settings.BASE_DIR) / "docs" / "distortions.md").read_text()
    for name in ("KAPPA_F1_MAX_FILE_BYTES", "KAPPA_F1_MAX_ROWS", "KAPPA_F1_MAX_LABELS"):
        assert name in doc


def _peak_bytes(rows: int, labels: int) -> int:
    names = [f"L{j}" for j in range(labels)]
    truth = [[names[i % labels], names[(i * 7) % labels]] for i in range(rows)]
    pred = [[names[(i * 3) % labels]] for i in range(rows)]
    tracemalloc.start()
    kappa_f1_report(truth, pred, kind="multilabel", labels=names, n_sim=10)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("labels", [2, 50])
def test_memory_grows_linearly_with_the_rows(labels):
    small, large = _peak_bytes(5_000, labels), _peak_bytes(20_000, labels)
    # Four times the rows: about four times the memory, never the square.
    assert large < 5 * small, (small, large)


def test_the_largest_allowed_file_fits_in_modest_memory(settings):
    peak = _peak_bytes(settings.KAPPA_F1_MAX_ROWS, settings.KAPPA_F1_MAX_LABELS)
    assert peak < 256 * 1024 * 1024, peak
