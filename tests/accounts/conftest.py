import pytest

from accounts.roles import CLINICIAN
from tests.factories import user_make


@pytest.fixture
def celery_eager():
    """Celery tasks run inside whoever sends them (the forgot-password e-mail is sent by a task):
    for tests of what the e-mail holds rather than of when it is sent."""
    from mentalbench.celery import app

    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = saved


@pytest.fixture
def clinician(django_user_model):
    return user_make(username="cleo", password="pw-cleo-long-enough", role=CLINICIAN)
