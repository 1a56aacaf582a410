"""Writes for the annotation app (services write, selectors read: docs/architecture.md).

Split along its seams; callers import the names below from `annotation.services` and anything
else from the module that defines it:
- `importing`: studies, rubrics, responders, raters and the imports that create them;
- `rating`: the clinician rating workflow (assignments, autosave, submit, flag, reclaim) and a
  clinician's invitation (the account itself comes from `accounts.users`);
- `labelling`: clinician distortion labelling;
- `sampling`: drawing the clinicians' sample of a study.
"""

from .importing import (
    WorkbookSource,
    clinician_rater_get_or_create,
    conversations_import,
    human_workbook_sources,
    judge_rater_get_or_create,
    mentalalign_import,
    responders_ensure,
    rubric_get_or_create_default,
    study_get_or_create,
)
from .labelling import label_annotation_save, label_assignment_submit
from .rating import (
    HEARTBEAT_MAX_SECONDS,
    AssignmentIncomplete,
    AssignmentLocked,
    assignment_flag,
    assignment_heartbeat,
    assignment_reassign,
    assignment_reclaim,
    assignment_submit,
    assignments_create,
    clinician_create,
    clinician_invite,
    rating_save,
)

__all__ = [
    "HEARTBEAT_MAX_SECONDS",
    "AssignmentIncomplete",
    "AssignmentLocked",
    "WorkbookSource",
    "assignment_flag",
    "assignment_heartbeat",
    "assignment_reassign",
    "assignment_reclaim",
    "assignment_submit",
    "assignments_create",
    "clinician_create",
    "clinician_invite",
    "clinician_rater_get_or_create",
    "conversations_import",
    "human_workbook_sources",
    "judge_rater_get_or_create",
    "label_annotation_save",
    "label_assignment_submit",
    "mentalalign_import",
    "rating_save",
    "responders_ensure",
    "rubric_get_or_create_default",
    "study_get_or_create",
]
