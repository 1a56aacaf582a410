"""The admin's import page runs the same parsers and services as the commands."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from accounts.roles import ADMIN, CLINICIAN, role_add
from annotation.models import Conversation, ImportLog, Response, Study


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_user("boss", password="pw", is_staff=True)
    client.force_login(user)
    return client


CSV = b"id,context,response,gpt4o\nc1,I cannot sleep,Reference,Model reply\n"


@pytest.mark.django_db
def test_admin_uploads_conversations_into_a_new_study(staff_client):
    response = staff_client.post(
        "/imports/",
        {
            "new_study": "Uploaded",
            "kind": "conversations",
            "file": SimpleUploadedFile("convs.csv", CSV, content_type="text/csv"),
        },
    )
    assert response.status_code == 200
    assert "1 conversations and 2 responses created" in response.content.decode()
    study = Study.objects.get(name="Uploaded")
    assert Conversation.objects.filter(study=study).count() == 1
    assert Response.objects.filter(conversation__study=study).count() == 2
    assert ImportLog.objects.get(study=study).file_name == "convs.csv"


@pytest.mark.django_db
def test_bad_upload_shows_the_error_with_the_uploaded_name_and_writes_nothing(staff_client):
    before = Study.objects.count()
    response = staff_client.post(
        "/imports/",
        {
            "new_study": "Broken",
            "kind": "conversations",
            "file": SimpleUploadedFile("broken.csv", b"id,text\n1,hello\n"),
        },
    )
    page = response.content.decode()
    assert "broken.csv, row 1, column &#x27;context&#x27;: required column" in page
    assert "/tmp/" not in page
    assert Study.objects.count() == before


@pytest.mark.django_db
def test_import_page_is_for_admins_only(client, django_user_model):
    response = client.get("/imports/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    clinician = django_user_model.objects.create_user("clin", password="pw")
    role_add(user=clinician, role=CLINICIAN)
    client.force_login(clinician)
    assert client.get("/imports/").status_code == 403
    # The admin role is staff or the "admin" group, as for every other admin page.
    admin = django_user_model.objects.create_user("chief", password="pw")
    role_add(user=admin, role=ADMIN)
    client.force_login(admin)
    assert client.get("/imports/").status_code == 200
