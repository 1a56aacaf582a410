"""What happens after a clinician submits a conversation, for training and test-retest."""

from __future__ import annotations

from .models import Assignment
from .retest import retest_schedule
from .training import training_outcome_record


def calibration_after_submit(*, assignment: Assignment) -> None:
    """A submitted practice conversation may complete the clinician's training (outcome
    recorded); a submitted real one may bring an earlier conversation back as a repeat."""
    if assignment.kind == Assignment.Kind.PRACTICE:
        training_outcome_record(study=assignment.conversation.study, rater=assignment.rater)
    elif assignment.kind == Assignment.Kind.RATING:
        retest_schedule(assignment=assignment)
