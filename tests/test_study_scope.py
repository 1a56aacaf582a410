"""Two studies at two sites with disjoint teams, and one person in both with different roles:
each member sees their own study in the roles they hold there, and nothing of the other — no
page, export, download or API answer, not its name, counts or texts."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from django.test import Client

from annotation.membership import (
    CLINICIAN,
    LEAD,
    MEMBER_RESEARCHER,
    member_add,
    member_remove,
    studies_for,
)
from annotation.models import Rater, Study, StudyMember
from tests.factories import study_make, user_make

pytestmark = pytest.mark.django_db


@dataclass
class Side:
    study: Study
    texts: tuple[str, ...]  # a conversation's context and a response, as written
    token: str  # a clinician's assignment


def _side(name: str, word: str, clinicians: list[Rater], judge: Rater) -> Side:
    from annotation.models import Rating, Score
    from annotation.services import assignments_create, rating_save

    study = study_make(
        name=name,
        conversations=2,
        context=lambda c: f"{word} context {c}",
        text=lambda c, key: f"{word} reply {c} {key}",
    )
    assignments = assignments_create(study=study, clinicians=clinicians, seed_rng=random.Random(1))
    attribute = study.rubric.attributes.order_by("position").first()
    for assignment in assignments:
        item = assignment.items.order_by("position").first()
        rating_save(
            assignment=assignment,
            item_token=item.token,
            user=assignment.rater.user,
            attribute_id=attribute.pk,
            score=4,
        )
        judged = Rating.objects.create(
            rater=judge,
            response=item.response,
            status=Rating.Status.COMPLETE,
            source=Rating.Source.IMPORT,
        )
        Score.objects.create(rating=judged, attribute=attribute, value=5)
        assignment.ratings.update(status=Rating.Status.COMPLETE)
    return Side(study=study, texts=(f"{word} context", f"{word} reply"), token=assignments[0].token)


@pytest.fixture
def two_studies(db):
    people = {
        name: user_make(username=name)
        for name in ("lead-a", "res-a", "clin-a", "lead-b", "res-b", "clin-b", "dual")
    }
    raters = {
        name: Rater.objects.create(kind=Rater.Kind.CLINICIAN, name=name, user=people[name])
        for name in ("clin-a", "clin-b", "dual")
    }
    judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name="judge-shared")
    alpha = _side("Alpha trial", "alpha", [raters["clin-a"]], judge)
    bravo = _side("Bravo cohort", "bravo", [raters["clin-b"], raters["dual"]], judge)
    for name, study, role, site in (
        ("lead-a", alpha, LEAD, "North hospital"),
        ("res-a", alpha, MEMBER_RESEARCHER, "North hospital"),
        ("clin-a", alpha, CLINICIAN, "South hospital"),
        ("lead-b", bravo, LEAD, "South hospital"),
        ("res-b", bravo, MEMBER_RESEARCHER, "South hospital"),
        ("dual", alpha, MEMBER_RESEARCHER, "North hospital"),
    ):
        member_add(study=study.study, user=people[name], role=role, site=site)
    return people, alpha, bravo


def _reader_urls(study: Study) -> list[str]:
    pk = study.pk
    return [
        f"/analysis/studies/{pk}/",
        f"/analysis/studies/{pk}/tables/reliability.csv",
        f"/analysis/studies/{pk}/ratings.csv",
        f"/analysis/studies/{pk}/judge-assisted/?judge=judge-shared",
        f"/analysis/studies/{pk}/release/",
        f"/api/studies/{pk}/",
        f"/api/studies/{pk}/reports/reliability/",
        f"/api/studies/{pk}/export/",
        f"/api/studies/{pk}/judge-assisted/?judge=judge-shared",
    ]


def _body(response) -> str:
    raw = b"".join(response.streaming_content) if response.streaming else response.content
    return raw.decode("utf-8", "replace")


def _assert_nothing_of(text: str, side: Side, where: str) -> None:
    for shown in (side.study.name, *side.texts):
        assert shown not in text, f"{where} shows {shown!r}"


def _ratings(study: Study) -> int:
    from annotation.models import Rating

    return Rating.objects.filter(response__conversation__study=study).count()


READERS = {
    "lead-a": "alpha",
    "res-a": "alpha",
    "dual": "alpha",
    "lead-b": "bravo",
    "res-b": "bravo",
}


@pytest.mark.parametrize("person", sorted(READERS))
def test_a_reader_opens_their_study_and_finds_nothing_of_the_other(two_studies, person):
    people, alpha, bravo = two_studies
    own, other = (alpha, bravo) if READERS[person] == "alpha" else (bravo, alpha)
    client = Client()
    client.force_login(people[person])
    for url in _reader_urls(own.study):
        assert client.get(url).status_code == 200, url
    for url in _reader_urls(other.study):
        response = client.get(url)
        assert response.status_code == 404, (url, response.status_code)
        _assert_nothing_of(_body(response), other, url)
    for url in (
        f"/analysis/studies/{other.study.pk}/release/start",
        "/api/jobs/release/",
    ):
        response = client.post(
            url, {"study": other.study.pk, "include_text": False}, content_type="application/json"
        )
        assert response.status_code == 404, (url, response.status_code)

    # The lists: their own study, and not a row or a name of the other.
    listing = client.get("/analysis/")
    assert own.study.name in _body(listing)
    _assert_nothing_of(_body(listing), other, "/analysis/")
    studies = client.get("/api/studies/").json()
    assert [s["name"] for s in studies["results"]] == [own.study.name]
    for url in ("/api/ratings/", "/api/label-annotations/", "/api/jobs/"):
        rows = client.get(url).json()["results"]
        assert all(row.get("study", own.study.pk) == own.study.pk for row in rows), url
    assert client.get("/api/ratings/").json()["count"] == _ratings(own.study)
    assert client.get(f"/api/ratings/?study={other.study.pk}").json()["count"] == 0
    from annotation.models import Rating

    other_rating = Rating.objects.filter(response__conversation__study=other.study).first()
    assert client.get(f"/api/ratings/{other_rating.pk}/").status_code == 404


@pytest.mark.parametrize("person", ["clin-a", "clin-b"])
def test_a_clinician_rates_in_their_study_and_reads_no_results(two_studies, person):
    people, alpha, bravo = two_studies
    own, other = (alpha, bravo) if person == "clin-a" else (bravo, alpha)
    client = Client()
    client.force_login(people[person])
    for url in _reader_urls(own.study) + _reader_urls(other.study):
        assert client.get(url).status_code in (403, 404), url
    assert client.get("/analysis/").status_code == 403
    for url in ("/rate/", "/rate/guidelines/"):
        _assert_nothing_of(_body(client.get(url)), other, url)
    assert client.get(f"/rate/{other.token}/").status_code == 404
    assert client.get(f"/rate/consent/{other.study.pk}/").status_code == 404


def test_one_person_reads_one_study_and_rates_in_the_other(two_studies):
    people, alpha, bravo = two_studies
    dual = people["dual"]
    assert list(studies_for(user=dual)) == [alpha.study]
    assert list(studies_for(user=dual, roles=(CLINICIAN,))) == [bravo.study]
    client = Client()
    client.force_login(dual)
    assert client.get(f"/analysis/studies/{alpha.study.pk}/").status_code == 200
    assert client.get(f"/analysis/studies/{bravo.study.pk}/").status_code == 404
    queue = _body(client.get("/rate/"))
    assert bravo.study.name in queue and alpha.study.name not in queue


def test_taken_off_a_study_the_same_session_finds_nothing_more(two_studies):
    people, alpha, _ = two_studies
    client = Client()
    client.force_login(people["res-a"])
    assert client.get(f"/analysis/studies/{alpha.study.pk}/").status_code == 200
    member_remove(study=alpha.study, user=people["res-a"], role=MEMBER_RESEARCHER)
    assert client.get(f"/analysis/studies/{alpha.study.pk}/").status_code == 403
    assert client.get(f"/api/studies/{alpha.study.pk}/").status_code == 403


def test_sites_and_teams_are_recorded(two_studies):
    people, alpha, bravo = two_studies
    sites = dict(
        StudyMember.objects.filter(study=alpha.study).values_list("user__username", "site")
    )
    assert sites == {
        "lead-a": "North hospital",
        "res-a": "North hospital",
        "clin-a": "South hospital",
        "dual": "North hospital",
    }
    # Given work in a study, a clinician joined its team (site still to be set).
    assert StudyMember.objects.filter(study=bravo.study, role=CLINICIAN).count() == 2


def test_the_migration_keeps_everyone_s_access(two_studies):
    """Global roles become memberships of every existing study (the upgrade's release note)."""
    import importlib

    from django.apps import apps

    from accounts.roles import ADMIN, RESEARCHER, role_add

    people, alpha, bravo = two_studies
    migration = importlib.import_module("annotation.migrations.0014_study_members")
    StudyMember.objects.all().delete()
    researcher = user_make(username="global-researcher")
    role_add(user=researcher, role=RESEARCHER)
    lab_admin = user_make(username="global-admin")
    role_add(user=lab_admin, role=ADMIN)
    staff = user_make(username="global-staff", is_staff=True)
    role_add(user=staff, role=ADMIN)
    migration.members_from_global_roles(apps, None)
    held = set(StudyMember.objects.values_list("user__username", "study__name", "role"))
    for study in (alpha.study.name, bravo.study.name):
        assert ("global-researcher", study, "researcher") in held
        assert ("global-admin", study, "lead") in held
    assert not any(user == "global-staff" for user, _, _ in held)  # staff see all anyway
    assert ("clin-a", alpha.study.name, "clinician") in held
    assert ("dual", bravo.study.name, "clinician") in held
    assert ("dual", alpha.study.name, "clinician") not in held


def test_a_platform_wide_researcher_reads_every_study_and_leads_none(two_studies):
    from django.http import Http404

    from accounts.roles import RESEARCHER, role_add
    from annotation.membership import ADJUDICATOR, study_for

    people, alpha, bravo = two_studies
    reader = user_make(username="platform-reader")
    role_add(user=reader, role=RESEARCHER)
    assert set(studies_for(user=reader)) == {alpha.study, bravo.study}
    for roles in ((LEAD,), (ADJUDICATOR,), (CLINICIAN,)):
        assert not studies_for(user=reader, roles=roles).exists()
        with pytest.raises(Http404):
            study_for(user=reader, study_id=alpha.study.pk, roles=roles)
