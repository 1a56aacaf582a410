import pytest

from annotation.roles import CLINICIAN, role_add


@pytest.fixture
def clinician(django_user_model):
    user = django_user_model.objects.create_user("cleo", password="pw-cleo-long-enough")
    role_add(user=user, role=CLINICIAN)
    return user
