"""The packed binary COPY read gives exactly what the row-by-row read gives."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from django.db import connection

from analysis import copy_read, selectors
from annotation.models import Rating, Score

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the COPY path is PostgreSQL's"
)


def _scores(read: copy_read.RatingScores) -> list[tuple[int, ...]]:
    """Every score with its rating's ids, in a fixed order (the reads' orders differ)."""
    conversation, responder, rater = (column[read.at] for column in read.rating_columns)
    return sorted(
        zip(
            conversation.tolist(),
            responder.tolist(),
            rater.tolist(),
            read.attribute.tolist(),
            read.value.tolist(),
            strict=True,
        )
    )


def _complete(study):
    return Rating.objects.filter(response__conversation__study=study, status=Rating.Status.COMPLETE)


def test_packed_scores_are_the_score_rows(small_study):
    ratings = _complete(small_study.study)
    # One rating with only some of its scores: the padding must not become scores.
    partial = ratings.first()
    Score.objects.filter(rating=partial).order_by("attribute__position")[:1].get().delete()
    Score.objects.filter(rating=partial, attribute__position__gte=5).delete()

    packed = copy_read.packed_rating_scores(ratings, per_rating=7)
    plain = selectors.plain_rating_scores(ratings=ratings)
    assert packed is not None
    assert _scores(packed) == _scores(plain)
    assert len(packed.value) == Score.objects.filter(rating__in=ratings).count()
    assert set(packed.value.tolist()) <= {1, 2, 3, 4, 5}


def test_more_scores_than_the_padding_fall_back(small_study):
    ratings = _complete(small_study.study)
    assert copy_read.packed_rating_scores(ratings, per_rating=6) is None
    assert copy_read.packed_rating_scores(ratings.none(), per_rating=7).value.size == 0


def test_the_report_frame_is_the_plain_reads_frame(small_study, monkeypatch):
    fast = selectors.scores_frame(study=small_study.study)
    monkeypatch.setattr(selectors, "packed_rating_scores", lambda *a, **k: None)
    plain = selectors.scores_frame(study=small_study.study)
    assert len(fast) == small_study.n_complete_scores

    def ordered(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.astype(str).sort_values(list(frame.columns)).reset_index(drop=True)

    pd.testing.assert_frame_equal(ordered(fast), ordered(plain))


def test_frame_columns_are_categoricals_sorted_as_strings(small_study):
    """groupby(sort=True) on the frame orders groups exactly as on plain strings."""
    frame = selectors.scores_frame(study=small_study.study)
    for column in ("conversation", "responder", "rater", "rater_kind", "attribute"):
        categories = list(frame[column].cat.categories)
        assert categories == sorted(categories)
        assert set(categories) == set(frame[column].astype(str))  # only labels in use
    by_string = frame.astype({"responder": str}).groupby("responder")["score"].mean()
    by_category = frame.groupby("responder")["score"].mean()
    assert list(by_category.index) == list(by_string.index)
    assert np.allclose(by_category.to_numpy(), by_string.to_numpy())
