"""Which admin actions a run offers: Run.can_cancel / can_resume / can_retry read only the row
(and the item counts the progress selector already has)."""

import pytest

from judging.models import Run

S = Run.Status


@pytest.mark.parametrize(
    ("status", "expected"),
    [(S.PENDING, True), (S.RUNNING, True), (S.CANCELLING, False), (S.CANCELLED, False),
     (S.FAILED, False), (S.DONE, False)],
)  # fmt: skip
def test_only_a_pending_or_running_run_can_be_cancelled(status: str, expected: bool) -> None:
    assert Run(status=status).can_cancel is expected


@pytest.mark.parametrize(
    ("status", "pending", "expected"),
    [(S.CANCELLED, 0, True), (S.FAILED, 3, True), (S.FAILED, 0, False), (S.DONE, 3, True),
     (S.DONE, 0, False),
     (S.RUNNING, 3, False), (S.CANCELLING, 3, False)],
)  # fmt: skip
def test_a_stopped_run_or_a_done_one_with_pending_items_can_resume(
    status: str, pending: int, expected: bool
) -> None:
    assert Run(status=status).can_resume(pending_items=pending) is expected


@pytest.mark.parametrize(
    ("status", "failed", "expected"),
    [(S.DONE, 2, True), (S.RUNNING, 1, True), (S.DONE, 0, False), (S.CANCELLING, 2, False)],
)  # fmt: skip
def test_failures_can_be_retried_unless_the_run_is_cancelling(
    status: str, failed: int, expected: bool
) -> None:
    assert Run(status=status).can_retry(failed_items=failed) is expected
