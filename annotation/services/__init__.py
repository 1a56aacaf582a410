"""Writes for the annotation app (services write, selectors read: docs/architecture.md).

Split along its seams, every name importable from `annotation.services`:
- `importing`: studies, rubrics, responders, raters and the imports that create them;
- `rating`: the clinician rating workflow (assignments, autosave, submit, flag, reclaim);
- `labelling`: clinician distortion labelling.
"""

from ..selectors import study_label_names  # noqa: F401
from .importing import (  # noqa: F401
    BATCH,
    WorkbookSource,
    _check_name_length,
    _conversations_for_workbook,
    _problem,
    _responses_for_workbook,
    clinician_rater_get_or_create,
    conversations_import,
    distortion_labels_set,
    human_workbook_sources,
    judge_rater_get_or_create,
    mentalalign_import,
    responders_check_study_limit,
    responders_ensure,
    rubric_get_or_create_default,
    study_get_or_create,
)
from .labelling import (  # noqa: F401
    label_annotation_save,
    label_assignment_submit,
    labels_check,
)
from .rating import (  # noqa: F401
    CLOCK_SKEW_MS,
    HEARTBEAT_MAX_SECONDS,
    OPEN,
    AssignmentIncomplete,
    AssignmentLocked,
    SaveResult,
    _clock,
    _items_copy,
    _items_for,
    _locked_open,
    _touch,
    assignment_flag,
    assignment_heartbeat,
    assignment_is_stale,
    assignment_reassign,
    assignment_reclaim,
    assignment_submit,
    assignments_create,
    clinician_create,
    rating_save,
    user_password_token_issue,
    username_clean,
)
