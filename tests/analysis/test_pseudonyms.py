"""Researchers see clinicians as stable study codes (C01, …), days instead of exact times, and
submitted work only; names, exact times and drafts need an admin (or a permission an admin
grants) and an explicit ?identified=1 / --identified, and every such request is audited."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.urls import reverse
from knox.models import AuthToken
from rest_framework.test import APIClient

from analysis.models import ExportLog
from analysis.pseudonyms import rater_codes
from annotation.membership import CLINICIAN, member_add
from annotation.models import (
    Assignment,
    Conversation,
    RaterCode,
    Rating,
    Responder,
    Response,
    Study,
)
from annotation.rater_codes import rater_codes_assign
from annotation.services import assignments_create
from tests.annotation.conftest import at_once
from tests.factories import clinician_make

NAMES = ("dr_a", "dr_b")
CODE = re.compile(r"C\d{2,}")
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _api(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=user)[1]}")
    return client


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _stream(response) -> str:
    assert response.status_code == 200, response
    return b"".join(response.streaming_content).decode()


def _codes(small_study) -> dict[str, str]:
    """Clinician name → code in the small study."""
    return dict(
        RaterCode.objects.filter(study=small_study.study).values_list("rater__name", "code")
    )


def test_researchers_see_the_same_codes_in_every_export_and_the_api(
    client, researcher, small_study, tmp_path
):
    client.force_login(researcher)
    study = small_study.study
    url = reverse("analysis:ratings_csv", args=[study.pk])
    long_rows = _csv(_stream(client.get(url)))
    wide_rows = _csv(_stream(client.get(url, {"layout": "wide"})))
    api_rows = _csv(_stream(_api(researcher).get(f"/api/studies/{study.pk}/export/")))
    listed = _api(researcher).get("/api/ratings/", {"study": study.pk, "limit": 1000}).json()
    out = tmp_path / "scores.csv"
    call_command("export_ratings", "--study", study.name, "--out", str(out), stdout=io.StringIO())
    command_rows = _csv(out.read_text())

    codes = _codes(small_study)
    assert set(codes) == set(NAMES) and all(CODE.fullmatch(c) for c in codes.values())
    assert len(set(codes.values())) == 2
    for rows in (long_rows, wide_rows, api_rows, command_rows, listed["results"]):
        clinicians = {r["rater"] for r in rows if r["rater_kind"] == "clinician"}
        judges = {r["rater"] for r in rows if r["rater_kind"] == "judge"}
        assert clinicians == set(codes.values())  # the same codes everywhere
        assert judges == {"judge-x", "judge-y"}  # judges keep their names
    # The per-clinician link survives: dr_b rated 4 conversations, under one code.
    dr_b = {r["conversation"] for r in long_rows if r["rater"] == codes["dr_b"]}
    assert dr_b == {"c0", "c1", "c2", "c3"}
    # Days, not times.
    assert all(DAY.fullmatch(r["created_at"]) for r in long_rows + command_rows)
    assert all(DAY.fullmatch(r["updated_at"]) for r in listed["results"])
    for text in (
        out.read_text(),
        str(listed),
    ):
        assert not any(name in text for name in NAMES)


def test_codes_are_given_on_joining_stable_and_numbered_per_study(small_study):
    study = small_study.study
    first = rater_codes(study_id=study.pk)  # the small study's clinicians joined it
    assert sorted(first.values()) == ["C01", "C02"]
    # A clinician who joins later (put on the team) gets the next number at once; nobody
    # else's code changes.
    newcomer = clinician_make(username="dr_new")
    member_add(study=study, user=newcomer.user, role=CLINICIAN)
    second = rater_codes(study_id=study.pk)
    assert {k: second[k] for k in first} == first and second[newcomer.pk] == "C03"
    # Given work again, or put on the team again: the same code.
    member_add(study=study, user=newcomer.user, role=CLINICIAN, site="Leeds")
    rater_codes_assign(study_id=study.pk, rater_ids=[newcomer.pk, *first])
    assert rater_codes(study_id=study.pk) == second
    # Another study numbers its own clinicians from C01: a code is not a person's global id.
    # Being given a conversation of it is joining it too; judges get no code.
    other = Study.objects.create(name="Other study", rubric=study.rubric)
    c = Conversation.objects.create(study=other, external_id="o1", context="ctx")
    Response.objects.create(conversation=c, responder=Responder.objects.first(), text="t")
    assert assignments_create(study=other, clinicians=[small_study.clinicians[1]])
    rater_codes_assign(study_id=other.pk, rater_ids=[j.pk for j in small_study.judges])
    assert rater_codes(study_id=other.pk) == {small_study.clinicians[1].pk: "C01"}
    assert rater_codes(study_id=study.pk) == second


@pytest.mark.django_db(transaction=True)
def test_clinicians_joining_at_once_get_different_codes(small_study):
    study_id = small_study.study.pk
    one, two = clinician_make(username="dr_one"), clinician_make(username="dr_two")
    at_once(
        lambda: rater_codes_assign(study_id=study_id, rater_ids=[one.pk]),
        lambda: rater_codes_assign(study_id=study_id, rater_ids=[two.pk]),
    )
    codes = rater_codes(study_id=study_id)
    assert sorted(codes.values()) == ["C01", "C02", "C03", "C04"]
    assert {codes[one.pk], codes[two.pk]} == {"C03", "C04"}


def test_dashboard_and_tables_show_codes_to_researchers(client, researcher, small_study):
    client.force_login(researcher)
    study = small_study.study
    html = client.get(reverse("analysis:dashboard", args=[study.pk])).content.decode()
    codes = _codes(small_study)
    assert codes["dr_a"] in html and codes["dr_b"] in html  # coverage and the filter choices
    assert "dr_a" not in html and "dr_b" not in html
    # The filter takes the code: dr_b alone as the human reference.
    subset = client.get(
        reverse("analysis:dashboard", args=[study.pk]), {"clinician": codes["dr_b"]}
    )
    assert subset.status_code == 200 and "dr_a" not in subset.content.decode()
    for name in ("ranking", "interrater", "reliability"):
        text = client.get(reverse("analysis:table_csv", args=[study.pk, name])).content.decode()
        assert not any(n in text for n in NAMES), name


def test_researchers_may_not_ask_for_names_drafts_or_times(client, researcher, small_study):
    study = small_study.study
    api = _api(researcher)
    assert api.get("/api/ratings/", {"identified": 1}).status_code == 403
    assert api.get("/api/ratings/", {"status": "draft"}).status_code == 403
    assert api.get(f"/api/studies/{study.pk}/export/", {"identified": 1}).status_code == 403
    # A clinician's name is no filter: it cannot be used to probe who rated.
    assert api.get("/api/ratings/", {"study": study.pk, "rater": "dr_b"}).json()["count"] == 0
    assert api.get("/api/ratings/", {"study": study.pk, "rater": "judge-x"}).json()["count"]
    client.force_login(researcher)
    url = reverse("analysis:ratings_csv", args=[study.pk])
    assert client.get(url, {"identified": 1}).status_code == 403
    assert not ExportLog.objects.filter(params__identified=True).exists()


def test_admin_gets_names_times_and_drafts_on_explicit_request_and_it_is_audited(
    client, staff_user, small_study
):
    study = small_study.study
    # A draft of a flagged conversation: unfinished work, never in a default list.
    draft = Rating.objects.get(status="draft")
    Assignment.objects.create(
        rater=draft.rater, conversation=draft.response.conversation, status="flagged"
    )
    api = _api(staff_user)
    default = api.get("/api/ratings/", {"study": study.pk, "limit": 1000}).json()
    assert draft.pk not in {r["id"] for r in default["results"]}
    assert not any(r["rater"] in NAMES for r in default["results"])
    assert not ExportLog.objects.exists()  # nothing identified was asked for

    drafts = api.get("/api/ratings/", {"study": study.pk, "status": "draft", "identified": "1"})
    assert [(r["id"], r["rater"]) for r in drafts.json()["results"]] == [(draft.pk, "dr_b")]
    exact = drafts.json()["results"][0]["created_at"]
    assert not DAY.fullmatch(exact) and exact.startswith(draft.created_at.date().isoformat())
    log = ExportLog.objects.get()
    assert (log.user, log.channel, log.what, log.study) == (
        staff_user,
        "api",
        "api:ratings",
        study,
    )
    assert log.params["identified"] == ["1"] and log.params["status"] == ["draft"]

    client.force_login(staff_user)
    url = reverse("analysis:ratings_csv", args=[study.pk])
    rows = _csv(_stream(client.get(url, {"identified": "1"})))
    assert {r["rater"] for r in rows if r["rater_kind"] == "clinician"} == set(NAMES)
    assert all(len(r["created_at"]) > 10 for r in rows)
    assert ExportLog.objects.filter(channel="web", params__identified=True).count() == 1
    # Admins too get codes when they do not ask.
    rows = _csv(_stream(client.get(url)))
    assert not {r["rater"] for r in rows} & set(NAMES)


def test_a_researcher_given_the_permission_may_ask_and_is_audited(researcher, small_study):
    researcher.user_permissions.add(
        Permission.objects.get(
            codename="view_clinician_identities", content_type__app_label="analysis"
        )
    )
    api = _api(researcher)
    response = api.get(f"/api/studies/{small_study.study.pk}/export/", {"identified": "true"})
    rows = _csv(_stream(response))
    assert {r["rater"] for r in rows if r["rater_kind"] == "clinician"} == set(NAMES)
    log = ExportLog.objects.get()
    assert (log.user, log.params) == (researcher, {"identified": True})


def test_export_command_identified_is_logged(small_study, tmp_path):
    out = tmp_path / "named.csv"
    call_command(
        "export_ratings", "--study", small_study.study.name, "--out", str(out), "--identified",
        stdout=io.StringIO(),
    )  # fmt: skip
    rows = _csv(out.read_text())
    assert {r["rater"] for r in rows if r["rater_kind"] == "clinician"} == set(NAMES)
    assert ExportLog.objects.get().params == {"out": str(out), "identified": True}


def test_only_staff_can_map_codes_to_clinicians_in_the_admin(
    client, django_user_model, researcher, small_study
):
    codes = rater_codes(study_id=small_study.study.pk)
    url = reverse("admin:annotation_ratercode_changelist")
    client.force_login(researcher)
    assert client.get(url).status_code == 302  # to the admin login: not staff
    client.force_login(django_user_model.objects.create_superuser("root", password="x-1234567"))
    html = client.get(url).content.decode()
    assert all(code in html for code in codes.values()) and "dr_b" in html
