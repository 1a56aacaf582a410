"""accounts' account modules import no app, so the study role names they read through
`user.study_memberships` are written out there: they must stay annotation's."""

from accounts.tokens import RATING_STUDY_ROLE
from annotation.models import StudyMember


def test_the_rating_study_role_is_annotations() -> None:
    assert RATING_STUDY_ROLE == StudyMember.Role.CLINICIAN
