"""Fixtures of the analysis tests, built by tests/factories.py: the small synthetic rating study,
the labelled distortion study, a clinician account."""

from __future__ import annotations

import pytest

from accounts.roles import CLINICIAN
from tests.factories import SmallStudy, labelled_distortion_study_make, small_study_make, user_make


@pytest.fixture
def small_study(db) -> SmallStudy:
    return small_study_make()


@pytest.fixture
def clinician_user(db):
    return user_make(username="clin", password="pw-12345678", role=CLINICIAN)


@pytest.fixture
def cd_study(db):
    """(study, run): the labelled distortion study."""
    return labelled_distortion_study_make()
