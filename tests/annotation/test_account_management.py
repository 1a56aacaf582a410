"""Admin pages act only on accounts with fewer rights than the actor's (one rule:
accounts.roles.manageable_users): an admin-group member never takes over staff or a superuser."""

import html
import re

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils.encoding import force_str
from django.utils.http import urlsafe_base64_decode

from accounts.roles import ADMIN, CLINICIAN, RESEARCHER, role_add, user_can_manage
from accounts.tokens import password_token_generator
from accounts.users import user_password_token_issue
from annotation.membership import member_add
from tests.factories import clinician_make, study_make


@pytest.fixture
def accounts(django_user_model):
    def user(name: str, role: str | None = None, **flags):
        u = django_user_model.objects.create_user(username=name, password="pw-" + name, **flags)
        if role:
            role_add(user=u, role=role)
        return u

    return {
        "superuser": user("root", is_staff=True, is_superuser=True),
        "staff": user("staffer", is_staff=True),
        "admin": user("groupadmin", ADMIN),
        "admin2": user("groupadmin2", ADMIN),
        "researcher": user("res", RESEARCHER),
        "clinician": user("clin", CLINICIAN),
        "inactive": user("gone", CLINICIAN, is_active=False),
    }


# actor → the accounts it may act on (every other pair is refused).
ALLOWED = {
    "superuser": {"staff", "admin", "admin2", "researcher", "clinician"},
    "staff": {"admin", "admin2", "researcher", "clinician"},
    "admin": {"researcher", "clinician"},
    "researcher": set(),
    "clinician": set(),
}


@pytest.mark.parametrize("actor", sorted(ALLOWED))
def test_the_manage_rule_never_reaches_up_or_sideways(accounts, actor):
    for name, target in accounts.items():
        expected = name in ALLOWED[actor]
        assert user_can_manage(actor=accounts[actor], target=target) is expected, (actor, name)


def test_admin_group_member_gets_no_reset_link_for_a_superuser(client, accounts):
    client.force_login(accounts["admin"])
    for target in ("superuser", "staff", "admin2"):
        url = reverse("annotation:manage_reset_link", args=[accounts[target].pk])
        response = client.post(url)
        assert response.status_code == 403, target
        assert b"set-password" not in response.content


def test_admin_group_member_gets_reset_links_for_clinicians_and_researchers(client, accounts):
    client.force_login(accounts["admin"])
    for target in ("clinician", "researcher"):
        url = reverse("annotation:manage_reset_link", args=[accounts[target].pk])
        page = client.post(url, follow=True).content.decode()
        uid, token = re.search(r"/accounts/set-password/([^/]+)/([^/]+)/", page).groups()
        assert force_str(urlsafe_base64_decode(uid)) == str(accounts[target].pk)
        assert password_token_generator.check_token(accounts[target], token)


def test_staff_gets_no_reset_link_for_a_superuser_but_a_superuser_does_for_staff(client, accounts):
    client.force_login(accounts["staff"])
    url = reverse("annotation:manage_reset_link", args=[accounts["superuser"].pk])
    assert client.post(url).status_code == 403
    client.force_login(accounts["superuser"])
    url = reverse("annotation:manage_reset_link", args=[accounts["staff"].pk])
    assert client.post(url).status_code == 302


def test_the_service_refuses_whatever_page_calls_it(accounts):
    with pytest.raises(PermissionDenied, match="root"):
        user_password_token_issue(actor=accounts["admin"], user=accounts["superuser"])
    with pytest.raises(PermissionDenied):
        user_password_token_issue(actor=accounts["admin"], user=accounts["inactive"])


def test_overview_offers_reset_links_only_for_manageable_clinicians(
    client, accounts, study, django_user_model
):
    ordinary = clinician_make(username="ordinary")
    boss = clinician_make(username="boss")  # a staff member who also rates
    boss.user.is_staff = True
    boss.user.save(update_fields=["is_staff"])
    from annotation.services import assignments_create

    assignments_create(study=study, clinicians=[ordinary, boss])
    client.force_login(accounts["admin"])
    page = client.get(reverse("annotation:manage")).content.decode()
    assert reverse("annotation:manage_reset_link", args=[ordinary.user_id]) in page
    assert reverse("annotation:manage_reset_link", args=[boss.user_id]) not in page


def _link_for(client, actor, target) -> str:
    client.force_login(actor)
    url = reverse("annotation:manage_reset_link", args=[target.pk])
    page = client.post(url, follow=True).content.decode()
    client.logout()
    return re.search(r"(/accounts/set-password/[^/]+/[^/]+/)", page).group(1)


def _set_password_with(client, link: str, password: str) -> None:
    form = client.get(link, follow=True)
    client.post(form.redirect_chain[-1][0] if form.redirect_chain else link,
                {"new_password1": password, "new_password2": password})  # fmt: skip


@pytest.mark.parametrize(
    "promotion",
    [
        pytest.param({"is_staff": True, "is_superuser": True}, id="staff-and-superuser"),
        pytest.param({"is_staff": True}, id="staff"),
        pytest.param({"group": ADMIN}, id="admin-group"),
        pytest.param({"study_role": "lead"}, id="study-lead"),
        pytest.param({"study_role": "adjudicator"}, id="study-adjudicator"),
    ],
)
def test_a_set_password_link_dies_when_the_account_is_promoted(client, accounts, promotion):
    promo = accounts["researcher"]
    link = _link_for(client, accounts["admin"], promo)
    # A superuser promotes the account after the link was handed out.
    if "group" in promotion:
        role_add(user=promo, role=promotion["group"])
    elif "study_role" in promotion:
        # A study's lead invites, adds and removes its team: rights a link must not carry over.
        member_add(study=study_make(name="Led"), user=promo, role=promotion["study_role"])
    else:
        for flag, value in promotion.items():
            setattr(promo, flag, value)
        promo.save()
    page = client.get(link, follow=True)
    assert b"new_password1" not in page.content  # the page says the link is invalid
    _set_password_with(client, link, "a-takeover-passphrase-91")
    promo.refresh_from_db()
    assert not promo.check_password("a-takeover-passphrase-91")
    assert promo.check_password("pw-res")


def test_a_set_password_link_still_works_while_the_rights_stay_the_same(client, accounts):
    promo = accounts["researcher"]
    link = _link_for(client, accounts["admin"], promo)
    promo.first_name = "Renamed"  # not a change of rights
    promo.save()
    # Nor is being given work in a study (an invitation's link must survive the first task).
    member_add(study=study_make(name="Rated"), user=promo, role="clinician")
    _set_password_with(client, link, "a-fresh-passphrase-1234")
    promo.refresh_from_db()
    assert promo.check_password("a-fresh-passphrase-1234")


@pytest.mark.parametrize(
    ("username", "said"),
    [
        ("Clin", "taken (as 'clin': usernames ignore case)"),
        ("CLIN", "taken (as 'clin'"),
        ("dora\tsmith", "may hold only letters, digits and @ . + - _"),
        ('=HYPERLINK("http://evil/?"&A1)', "may hold only letters, digits"),
        ("@SUM", "must start with a letter or a digit"),
        ("-dora", "must start with a letter or a digit"),
        ("d" * 151, "at most 150 characters"),
        ("   ", "This field is required"),
    ],
)
def test_invite_refuses_usernames_that_clash_or_could_mislead(
    client, accounts, django_user_model, username, said
):
    client.force_login(accounts["admin"])
    before = django_user_model.objects.count()
    response = client.post(reverse("annotation:manage_invite"), {"username": username})
    assert response.status_code == 422
    assert said in html.unescape(response.content.decode())
    assert django_user_model.objects.count() == before  # nothing half-made


def test_invite_accepts_an_ordinary_new_username(client, accounts, django_user_model):
    client.force_login(accounts["admin"])
    response = client.post(reverse("annotation:manage_invite"), {"username": " dr.Lee-2 "})
    assert response.status_code == 302
    assert django_user_model.objects.filter(username="dr.Lee-2").exists()


def test_renaming_a_user_in_the_django_admin_to_a_name_taken_in_another_case_is_refused(
    client, accounts, django_user_model
):
    """Django's own user change form checks the exact name only; the unique index then failed
    the save with a server error. The platform's admin form refuses it on the form."""
    client.force_login(accounts["superuser"])
    target = accounts["researcher"]
    url = reverse("admin:auth_user_change", args=[target.pk])
    form = {
        "username": "Clin",
        "first_name": "",
        "last_name": "",
        "email": "",
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01",
        "initial-date_joined_1": "00:00:00",
    }
    response = client.post(url, form)
    assert response.status_code == 200  # the form again, with the error
    assert "taken (as 'clin': usernames ignore case)" in html.unescape(response.content.decode())
    target.refresh_from_db()
    assert target.username == "res"
    response = client.post(url, {**form, "username": "Res"})  # its own name in another case
    assert response.status_code == 302
    target.refresh_from_db()
    assert target.username == "Res"


@pytest.mark.parametrize(
    ("username", "said"),
    [("Clin", "taken (as 'clin': usernames ignore case)"), ("@SUM", "must start with a letter")],
)
def test_the_django_admin_adds_users_by_the_invite_rule(
    client, accounts, django_user_model, username, said
):
    client.force_login(accounts["superuser"])
    before = django_user_model.objects.count()
    password = "a-long-enough-passphrase-42"
    response = client.post(
        reverse("admin:auth_user_add"),
        {
            "username": username,
            "password1": password,
            "password2": password,
            "usable_password": "true",
        },
    )
    assert response.status_code == 200
    assert said in html.unescape(response.content.decode())
    assert django_user_model.objects.count() == before


def test_the_django_admin_still_adds_an_ordinary_user(client, accounts, django_user_model):
    client.force_login(accounts["superuser"])
    assert client.get(reverse("admin:auth_user_add")).status_code == 200
    password = "a-long-enough-passphrase-42"
    response = client.post(
        reverse("admin:auth_user_add"),
        {
            "username": "dr.New",
            "password1": password,
            "password2": password,
            "usable_password": "true",
        },
    )
    assert response.status_code == 302
    assert django_user_model.objects.get(username="dr.New").check_password(password)


@pytest.mark.django_db(transaction=True)
def test_the_database_refuses_a_username_that_differs_only_in_case(django_user_model):
    from django.db import IntegrityError

    django_user_model.objects.create_user(username="tess")
    with pytest.raises(IntegrityError):
        django_user_model.objects.create_user(username="Tess")


def test_an_invite_that_loses_the_race_says_so_and_leaves_nothing(
    accounts, django_user_model, monkeypatch
):
    """Two invites at once both pass the look-up; the second insert meets the unique index."""
    from accounts import users
    from annotation.models import Rater
    from annotation.services import clinician_create

    monkeypatch.setattr(users, "username_clean", lambda username: username)
    with pytest.raises(ValueError, match="'Clin' was just taken"):
        clinician_create(username="Clin")
    assert not django_user_model.objects.filter(username="Clin").exists()
    assert not Rater.objects.filter(name="Clin").exists()
    assert django_user_model.objects.get(username__iexact="clin").username == "clin"


@pytest.mark.django_db(transaction=True)
def test_the_index_migration_names_existing_clashes_instead_of_failing_bare(django_user_model):
    from django.db import IntegrityError, connection
    from django.db.migrations.executor import MigrationExecutor

    leaves = MigrationExecutor(connection).loader.graph.leaf_nodes()
    before = ("accounts", "0003_token_name")
    try:
        MigrationExecutor(connection).migrate([before])
        django_user_model.objects.create_user(username="tess")
        django_user_model.objects.create_user(username="Tess")
        with pytest.raises(RuntimeError, match="differ only in case exist: 'Tess' / 'tess'"):
            MigrationExecutor(connection).migrate(leaves)
        django_user_model.objects.filter(username="Tess").update(username="tess2")
        MigrationExecutor(connection).migrate(leaves)
        with pytest.raises(IntegrityError, match="accounts_username_lower_uniq"):
            django_user_model.objects.create_user(username="TESS2")
    finally:
        django_user_model.objects.filter(username__in=["tess", "Tess", "tess2"]).delete()
        MigrationExecutor(connection).migrate(leaves)
