"""A database or cache that is restarting answers 503 "retrying" (a page that reloads itself),
never a 500 error page; any other failure is still a plain 500."""

from __future__ import annotations

import pytest
import redis
from django.db import OperationalError
from django.test import Client

from mentalbench import views


def _failing_cursor(exc: Exception):
    def cursor():
        raise exc

    return cursor


@pytest.mark.parametrize(
    "exc",
    [
        OperationalError("connection to server at 127.0.0.1 failed: Connection refused"),
        redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379"),
    ],
)
def test_an_unreachable_database_or_cache_answers_503_retrying(db, monkeypatch, exc):
    with monkeypatch.context() as patch:  # undone before the test database is cleaned up
        patch.setattr(views.connection, "cursor", _failing_cursor(exc))
        response = Client(raise_request_exception=False).get("/healthz")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    page = response.content.decode()
    assert "retrying" in page and 'http-equiv="refresh"' in page
    assert "Connection refused" not in page and "6379" not in page  # no internals shown


def test_any_other_failure_is_still_a_500(db, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(views.connection, "cursor", _failing_cursor(ValueError("a bug")))
        response = Client(raise_request_exception=False).get("/healthz")
    assert response.status_code == 500
    assert "retrying" not in response.content.decode()
