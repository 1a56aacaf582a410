"""Fixtures for the clinician rating tests: a small study, clinicians with accounts, assignments."""

import random
import threading
from collections.abc import Callable

import pytest
from django.db import connection
from playwright.sync_api import expect

from annotation.services import assignments_create
from tests.factories import clinician_make, study_make


def at_once(*calls: Callable[[], object]) -> list:
    """Run the calls in threads released at the same instant (two browser tabs, two database
    connections) and return their results in order; an error in any of them is raised here."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)
    errors: list[BaseException] = []

    def run(i: int, call: Callable[[], object]) -> None:
        try:
            barrier.wait()
            results[i] = call()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the calling thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def study(db):
    return study_make()


@pytest.fixture
def clinician(db, django_user_model):
    return clinician_make(username="alice")


@pytest.fixture
def other_clinician(db, django_user_model):
    return clinician_make(username="bob")


@pytest.fixture
def assignment(study, clinician):
    """Alice's first assignment of the study (all conversations go to her)."""
    created = assignments_create(study=study, clinicians=[clinician], seed_rng=random.Random(1))
    return created[0]


@pytest.fixture
def alice(client, clinician):
    client.force_login(clinician.user)
    return client


def wait_saved(page, timeout: float = 15000) -> None:
    """Wait until the page says every change is saved.

    A Playwright locator assertion, not `wait_for_function`: that evaluates a string in the page,
    which the Content-Security-Policy (no eval) refuses.
    """
    expect(page.locator("#save-state")).to_contain_text("All changes saved", timeout=timeout)


def tab_to(page, selector: str, limit: int = 200) -> None:
    """Press Tab until the focused element matches (keyboard only, no clicks)."""
    for _ in range(limit):
        if page.evaluate(f"document.activeElement.matches({selector!r})"):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"Tab never reached {selector}")
