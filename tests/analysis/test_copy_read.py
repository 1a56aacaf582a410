"""The binary COPY read gives the very array the row-by-row read gives."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from analysis import copy_read, selectors
from annotation.models import Rating, Score

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the COPY path is PostgreSQL's"
)


def _rows(study):
    return (
        Score.objects.filter(rating__response__conversation__study=study)
        .order_by("pk")
        .values_list(
            "rating__response__conversation_id", "rating__rater_id", "attribute_id", "value"
        )
    )


def test_binary_copy_reads_the_same_integers_as_the_plain_path(small_study):
    rows = _rows(small_study.study)
    fast = copy_read.int_rows(rows, 4)
    assert fast.dtype == np.int64 and fast.shape == (Score.objects.count(), 4)
    assert np.array_equal(fast, copy_read._plain(rows, 4))
    assert np.array_equal(copy_read.int_rows(rows.none(), 4), np.empty((0, 4), np.int64))


def test_a_null_falls_back_to_the_plain_path(small_study):
    """A NULL makes a shorter record: the plain path reads it (and fails as it always did)."""
    rows = Rating.objects.filter(response__conversation__study=small_study.study).values_list(
        "pk", "run_id"
    )  # run_id is NULL for every rating here
    with pytest.raises(TypeError):
        copy_read.int_rows(rows, 2)


def test_the_report_frame_is_unchanged(small_study, monkeypatch):
    fast = selectors.scores_frame(study=small_study.study)
    monkeypatch.setattr(selectors, "int_rows", copy_read._plain)
    plain = selectors.scores_frame(study=small_study.study)
    assert len(fast) == small_study.n_complete_scores
    assert fast.equals(plain)
