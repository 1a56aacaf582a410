import pytest

from annotation.roles import CLINICIAN
from tests.factories import user_make


@pytest.fixture
def clinician(django_user_model):
    return user_make(username="cleo", password="pw-cleo-long-enough", role=CLINICIAN)
