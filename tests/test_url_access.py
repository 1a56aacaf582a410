"""Every URL pattern of the project, for every kind of user: who may open what.

The patterns are read from the URL resolver, so a new URL cannot slip through: a pattern with
no entry in EXPECTED fails `test_every_url_pattern_has_an_expectation` until someone decides
who may open it. Each pattern is then requested (GET, and POST where it changes state) as
anonymous, a clinician who holds the fixture's assignments, another clinician who does not, a
researcher, a member of the *admin* group who is not staff, a staff account (not superuser) and
a superuser, with URL parameters filled from a small real study (assignment tokens, ids).

Django's own admin has over a hundred patterns (one set per registered model, all guarded by
the same AdminSite.admin_view): it is covered by the representative sample in ADMIN_SAMPLE,
and every other admin pattern is left to Django.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.utils.encoding import force_bytes
from django.utils.http import int_to_base36, urlsafe_base64_encode

from accounts.tokens import password_token_generator

ROLES = ("anonymous", "clinician", "other", "researcher", "admin", "staff", "superuser")
# A study's lead (a platform account with no role group, the lead of the fixture's study): walked
# only where a case says what the lead gets, in this place among the roles (least to most
# privileged), e.g. get={**_by_role(...), "lead": 200}.
WALK_ORDER = (*ROLES[:4], "lead", *ROLES[4:])
LOGIN = "login"  # 302 to the sign-in page
ADMIN_LOGIN = "admin-login"  # 302 to Django admin's sign-in page
REDIRECT = "redirect"  # 302 anywhere but a sign-in page


def _by_role(*statuses) -> dict[str, int | str]:
    assert len(statuses) == len(ROLES)
    return dict(zip(ROLES, statuses, strict=True))


EVERYONE_200 = _by_role(*[200] * 7)
# role_required(CLINICIAN): admins pass every role check, but a token is answered only for
# the clinician who holds the assignment (404 for everyone else, admins included).
OWN_ASSIGNMENT = (LOGIN, 200, 404, 403, 404, 404, 404)
ADMINS = (LOGIN, 403, 403, 403, 200, 200, 200)
ADMINS_REDIRECT = (LOGIN, 403, 403, 403, 302, 302, 302)
RESEARCHERS = (LOGIN, 403, 403, 200, 200, 200, 200)
API = (401, 403, 403, 200, 200, 200, 200)
API_OWN = (401, 403, 403, 200, 404, 404, 404)  # the researcher's own job
API_NOT_GET = (401, 403, 403, 405, 405, 405, 405)
API_NOT_POST = API_NOT_GET
# A job's routes, as the API's router spells them (a job's id is a UUID).
JOB = "api/jobs/(?P<pk>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
FORMAT = "\\.(?P<format>[a-z0-9]+)/?$"
API_NO_FILE = (401, 403, 403, 404, 404, 404, 404)
NOT_GET = _by_role(*[405] * 7)
NOT_POST = _by_role(*[405] * 7)
NOWHERE = _by_role(*[404] * 7)
MOVED = _by_role(*[301] * 7)  # allauth's old paths, to their new ones
SIGNED_IN_GO_HOME = (200, *[REDIRECT] * 6)
NO_PENDING_SIGN_IN = (LOGIN, *[REDIRECT] * 6)
OWN_ACCOUNT_REDIRECT = (LOGIN, *[REDIRECT] * 6)
REAUTH = (LOGIN, 403, 403, 403, REDIRECT, REDIRECT, REDIRECT)
# The world's accounts have no password (force_login, no sign-in record): one with nothing to
# re-authenticate with adds a factor only right after signing in, so it is sent to sign in.
ENROL = (LOGIN, LOGIN, LOGIN, LOGIN, REDIRECT, REDIRECT, REDIRECT)
UNENROL = (LOGIN, 404, 404, 404, REDIRECT, REDIRECT, REDIRECT)
REFUSED = ADMINS[:4]  # anonymous, clinicians and researchers never act on accounts
# Adding and changing model endpoints: Django's model permissions (the fixture's superuser).
ENDPOINT_MANAGERS = (LOGIN, 403, 403, 403, 403, 403, 200)


@dataclass
class Case:
    """One request: `url` is formatted with the fixture's values; `data` may depend on the role."""

    url: str
    get: dict | None = None
    post: dict | None = None
    data: Callable[[dict, str], dict] = field(default=lambda world, role: {})


def C(url, get=None, post=None, data=None) -> Case:  # noqa: N802 - reads as a table row
    return Case(
        url=url,
        get=_by_role(*get) if isinstance(get, tuple) else get,
        post=_by_role(*post) if isinstance(post, tuple) else post,
        data=data or (lambda world, role: {}),
    )


EXPECTED: dict[str, list[Case]] = {
    "": [C("/", get=(LOGIN, REDIRECT, REDIRECT, REDIRECT, REDIRECT, REDIRECT, REDIRECT))],
    "healthz": [C("/healthz", get=EVERYONE_200)],
    "favicon.ico": [C("/favicon.ico", get=_by_role(*[301] * 7))],  # to the static file
    # An empty sign-in form: answered with the form again (no authentication is attempted).
    "accounts/login/": [
        C("/accounts/login/", get=SIGNED_IN_GO_HOME, post=SIGNED_IN_GO_HOME),
    ],
    # GET asks "sign out?"; POST signs out, back to the sign-in page.
    "accounts/logout/": [
        C("/accounts/logout/", get=(LOGIN, *[200] * 6), post=_by_role(*[LOGIN] * 7)),
    ],
    "accounts/sign-ins/": [C("/accounts/sign-ins/", get=ADMINS, post=ADMINS)],
    # --- django-allauth's account pages. Every user acts on their own account only.
    "accounts/inactive/": [C("/accounts/inactive/", get=EVERYONE_200, post=NOT_POST)],
    # Self sign-up is closed: the "closed" page, or home for the signed-in.
    "accounts/signup/": [C("/accounts/signup/", get=SIGNED_IN_GO_HOME, post=SIGNED_IN_GO_HOME)],
    # The fixture's accounts have no usable password, so no password re-entry is possible
    # (403); privileged accounts re-enter their second factor instead.
    "accounts/reauthenticate/": [
        C("/accounts/reauthenticate/", get=REAUTH, post=REAUTH),
    ],
    # Their own e-mail address, read-only (admins set it): a POST is refused.
    "accounts/email/": [
        C("/accounts/email/", get=(LOGIN, *[200] * 6), post=(LOGIN, *[405] * 6)),
    ],
    "accounts/confirm-email/": [C("/accounts/confirm-email/", get=EVERYONE_200, post=NOT_POST)],
    "accounts/confirm-email/(?P<key>[-:\\w]+)/$": [
        C("/accounts/confirm-email/no-such-key/", get=EVERYONE_200, post=_by_role(*[404] * 7))
    ],
    # The signed-in account's own password, behind re-authentication (accounts/views.py): the
    # fixture's accounts have no usable password, so those without an authenticator have
    # nothing to re-authenticate with and set none themselves (403); the privileged re-enter
    # their code first. Without a password "change" sends to "set".
    "accounts/password/change/": [
        C(
            "/accounts/password/change/",
            get=(LOGIN, 403, 403, 403, REDIRECT, REDIRECT, REDIRECT),
            post=(LOGIN, 403, 403, 403, REDIRECT, REDIRECT, REDIRECT),
        )
    ],
    "accounts/password/set/": [
        C(
            "/accounts/password/set/",
            get=(LOGIN, 403, 403, 403, REDIRECT, REDIRECT, REDIRECT),
            post=(LOGIN, 403, 403, 403, REDIRECT, REDIRECT, REDIRECT),
        )
    ],
    # Forgot password: anyone may ask (the answer never says whether the address is known).
    "accounts/password/reset/": [
        C("/accounts/password/reset/", get=EVERYONE_200, post=EVERYONE_200),
    ],
    "accounts/password/reset/done/": [
        C("/accounts/password/reset/done/", get=EVERYONE_200, post=NOT_POST)
    ],
    # A made-up key: the "bad link" page, for everyone; nothing is changed.
    "accounts/password/reset/key/(?P<uidb36>[0-9A-Za-z]+)-(?P<key>.+)/$": [
        C(
            "/accounts/password/reset/key/{uidb36}-made-up-key/",
            get=EVERYONE_200,
            post=EVERYONE_200,
            data=lambda world, role: {"password1": "x-Taken-over-1", "password2": "x-Taken-over-1"},
        )
    ],
    "accounts/password/reset/key/done/": [
        C("/accounts/password/reset/key/done/", get=EVERYONE_200, post=NOT_POST)
    ],
    # Sign-in by e-mailed code is off: nothing to confirm.
    "accounts/login/code/confirm/": [
        C("/accounts/login/code/confirm/", get=NO_PENDING_SIGN_IN, post=NO_PENDING_SIGN_IN)
    ],
    # --- Two-factor: an account's own authenticators.
    "accounts/2fa/": [C("/accounts/2fa/", get=(LOGIN, *[200] * 6), post=(LOGIN, *[405] * 6))],
    # The code prompt belongs to a sign-in in progress: there is none here.
    "accounts/2fa/authenticate/": [
        C("/accounts/2fa/authenticate/", get=NO_PENDING_SIGN_IN, post=NO_PENDING_SIGN_IN)
    ],
    "accounts/2fa/reauthenticate/": [
        C("/accounts/2fa/reauthenticate/", get=ADMINS, post=ADMINS),
    ],
    # Enrolling: the form for those without TOTP; the privileged (enrolled by the fixture) must
    # first give their code again.
    "accounts/2fa/totp/activate/": [
        C("/accounts/2fa/totp/activate/", get=ENROL, post=ENROL),
    ],
    "accounts/2fa/totp/deactivate/": [
        C("/accounts/2fa/totp/deactivate/", get=UNENROL, post=UNENROL),
    ],
    "accounts/2fa/recovery-codes/": [
        C("/accounts/2fa/recovery-codes/", get=(LOGIN, *[404] * 6), post=(LOGIN, *[405] * 6))
    ],
    "accounts/2fa/recovery-codes/generate/": [
        C(
            "/accounts/2fa/recovery-codes/generate/",
            get=(LOGIN, 200, 200, 200, REDIRECT, REDIRECT, REDIRECT),
            post=(LOGIN, 200, 200, 200, REDIRECT, REDIRECT, REDIRECT),
        ),
    ],
    "accounts/2fa/recovery-codes/download/": [
        C(
            "/accounts/2fa/recovery-codes/download/",
            get=(LOGIN, *[404] * 6),
            post=(LOGIN, *[404] * 6),
        )
    ],
    # --- Single sign-on (off in the tests' settings: the provider's pages answer 404).
    "accounts/3rdparty/login/cancelled/": [
        C("/accounts/3rdparty/login/cancelled/", get=EVERYONE_200, post=NOT_POST)
    ],
    "accounts/3rdparty/login/error/": [
        C("/accounts/3rdparty/login/error/", get=_by_role(*[401] * 7), post=NOT_POST)
    ],
    "accounts/3rdparty/signup/": [
        C("/accounts/3rdparty/signup/", get=_by_role(*[LOGIN] * 7), post=_by_role(*[LOGIN] * 7))
    ],
    "accounts/3rdparty/": [
        C("/accounts/3rdparty/", get=(LOGIN, *[200] * 6), post=(LOGIN, *[200] * 6))
    ],
    "accounts/social/login/cancelled/": [
        C("/accounts/social/login/cancelled/", get=MOVED, post=MOVED)
    ],
    "accounts/social/login/error/": [C("/accounts/social/login/error/", get=MOVED, post=MOVED)],
    "accounts/social/signup/": [C("/accounts/social/signup/", get=MOVED, post=MOVED)],
    "accounts/social/connections/": [C("/accounts/social/connections/", get=MOVED, post=MOVED)],
    "accounts/oidc/(?P<provider_id>[^/]+)/login/": [
        C("/accounts/oidc/hospital/login/", get=NOWHERE, post=NOWHERE)
    ],
    "accounts/oidc/(?P<provider_id>[^/]+)/login/callback/": [
        C("/accounts/oidc/hospital/login/callback/", get=NOWHERE, post=NOWHERE)
    ],
    "accounts/tokens/": [
        C(
            "/accounts/tokens/",
            get=RESEARCHERS,
            post=RESEARCHERS,
            data=lambda world, role: {"days": 30},
        )
    ],
    # The researcher's own token: only its owner revokes it (requests go in ROLES order).
    "accounts/tokens/<str:digest>/revoke": [
        C(
            "/accounts/tokens/{token_digest}/revoke",
            get=NOT_GET,
            post=(LOGIN, 403, 403, 302, 404, 404, 404),
        )
    ],
    "imports/": [C("/imports/", get=ADMINS, post=ADMINS)],
    "rate/": [C("/rate/", get=(LOGIN, 200, 200, 403, 200, 200, 200))],
    "rate/guidelines/": [C("/rate/guidelines/", get=(LOGIN, 200, 200, 403, 200, 200, 200))],
    # A clinician's own adjudication feedback (admins pass every role check: theirs is empty).
    "rate/adjudicated/": [C("/rate/adjudicated/", get=(LOGIN, 200, 200, 403, 200, 200, 200))],
    "rate/<str:token>/": [
        C("/rate/{token}/", get=OWN_ASSIGNMENT),
        C("/rate/{label_token}/", get=OWN_ASSIGNMENT),
    ],
    "rate/<str:token>/save": [
        C(
            "/rate/{token}/save",
            get=NOT_GET,
            post=OWN_ASSIGNMENT,
            data=lambda world, role: {
                "item": world["item_token"],
                "attribute": world["attribute_id"],
                "score": 4,
            },
        )
    ],
    "rate/<str:token>/labels": [
        C(
            "/rate/{label_token}/labels",
            get=NOT_GET,
            post=OWN_ASSIGNMENT,
            data=lambda world, role: {"dominant": world["label"]},
        )
    ],
    # Incomplete work: the page again with what is missing (422) for its clinician only.
    "rate/<str:token>/submit": [
        C("/rate/{token}/submit", get=NOT_GET, post=(LOGIN, 422, 404, 403, 404, 404, 404))
    ],
    # Marking a response unsafe (without JavaScript: back to the page); its clinician only.
    "rate/<str:token>/unsafe": [
        C(
            "/rate/{token}/unsafe",
            get=NOT_GET,
            post=(LOGIN, 302, 404, 403, 404, 404, 404),
            data=lambda world, role: {"item": world["item_token"], "reason": "dangerous advice"},
        )
    ],
    "rate/<str:token>/flag": [
        C(
            "/rate/{token}/flag",
            get=NOT_GET,
            post=(LOGIN, 302, 404, 403, 404, 404, 404),
            data=lambda world, role: {"reason": "broken response"},
        )
    ],
    # A submitted practice conversation beside its references: its clinician only; a real
    # conversation has no such page.
    "rate/<str:token>/feedback": [
        C("/rate/{practice_token}/feedback", get=OWN_ASSIGNMENT),
        C("/rate/{token}/feedback", get=(LOGIN, 404, 404, 403, 404, 404, 404)),
    ],
    "rate/<str:token>/heartbeat": [
        C("/rate/{token}/heartbeat", get=NOT_GET, post=(LOGIN, 204, 404, 403, 404, 404, 404))
    ],
    "manage/": [C("/manage/", get={**_by_role(*ADMINS), "lead": 403})],
    "manage/assign": [
        C(
            "/manage/assign",
            get=NOT_GET,
            post=ADMINS_REDIRECT,
            data=lambda world, role: {
                "study": world["study_id"],
                "clinicians": [world["clinician_rater_id"], world["other_rater_id"]],
                "overlap": 2,
                "overlap_percent": 100,
            },
        )
    ],
    "manage/sample": [
        C(
            "/manage/sample",
            get=NOT_GET,
            post=ADMINS_REDIRECT,
            data=lambda world, role: {"study": world["study_id"], "size": 1, "method": "uniform"},
        )
    ],
    "manage/assignments/<int:pk>/reassign": [
        C(
            "/manage/assignments/{assignment_id}/reassign",
            get=NOT_GET,
            post=ADMINS_REDIRECT,
            data=lambda world, role: {"rater": world["other_rater_id"]},
        )
    ],
    "manage/assignments/<int:pk>/reclaim": [
        C(
            "/manage/assignments/{assignment_id}/reclaim",
            get=NOT_GET,
            post=ADMINS_REDIRECT,
            data=lambda world, role: {"rater": world["other_rater_id"]},
        )
    ],
    "manage/invite": [
        C(
            "/manage/invite",
            get=NOT_GET,
            post=ADMINS_REDIRECT,
            data=lambda world, role: {"username": f"invitee-{role}"},
        )
    ],
    # Set-password links: an admin-group member gets one for a clinician, never for a
    # superuser, staff or themselves; staff not for a superuser; nobody for their own account.
    "manage/users/<int:pk>/reset-link": [
        C(
            "/manage/users/{superuser_id}/reset-link",
            get=NOT_GET,
            post=REFUSED + (403, 403, 403),
        ),
        C("/manage/users/{staff_id}/reset-link", get=NOT_GET, post=REFUSED + (403, 403, 302)),
        C("/manage/users/{admin_id}/reset-link", get=NOT_GET, post=REFUSED + (403, 302, 302)),
        C("/manage/users/{clinician_user_id}/reset-link", get=NOT_GET, post=ADMINS_REDIRECT),
        C("/manage/users/{researcher_id}/reset-link", get=NOT_GET, post=ADMINS_REDIRECT),
    ],
    "manage/audit/": [
        C("/manage/audit/", get=ADMINS),
        C("/manage/audit/?format=csv", get=ADMINS),
        # Filters: the page, its CSVs, and a wrong filter (400 with the reason, for admins).
        C(
            "/manage/audit/?study={study_id}&clinician={clinician_rater_id}&conversation=c0"
            "&date_from=2020-01-01&date_to=2999-12-31",
            get=ADMINS,
        ),
        C("/manage/audit/?format=labels-csv&clinician={clinician_rater_id}", get=ADMINS),
        C("/manage/audit/?date_from=2020-02-01&date_to=2020-01-01", get=ADMINS[:4] + (400,) * 3),
    ],
    # A study's team: its platform admins and its leads; to everyone else the study does not
    # exist (a platform-wide researcher reads every study's results but manages no team). The
    # walk adds nobody (an unknown username: the form again, 422); the first who may removes
    # the fixture's member, and those after find nothing to remove.
    "manage/studies/<int:study_id>/team/": [
        C(
            "/manage/studies/{study_id}/team/",
            get={**_by_role(LOGIN, 404, 404, 404, 200, 200, 200), "lead": 200},
            post={**_by_role(LOGIN, 404, 404, 404, 422, 422, 422), "lead": 422},
            data=lambda world, role: {"username": f"nobody-{role}", "role": "clinician"},
        ),
        C(
            "/manage/studies/{label_study_id}/team/",
            get={**_by_role(LOGIN, 404, 404, 404, 200, 200, 200), "lead": 404},
        ),
    ],
    # An empty form: refused with the reasons (422), nothing made; everyone else as the page.
    "manage/studies/<int:study_id>/team/invite": [
        C(
            "/manage/studies/{study_id}/team/invite",
            get=NOT_GET,
            post={**_by_role(LOGIN, 404, 404, 404, 422, 422, 422), "lead": 422},
        ),
    ],
    "manage/studies/<int:study_id>/team/thresholds": [
        C(
            "/manage/studies/{study_id}/team/thresholds",
            get=NOT_GET,
            post={**_by_role(LOGIN, 404, 404, 404, 422, 422, 422), "lead": 422},
        ),
    ],
    "manage/studies/<int:study_id>/team/<int:member_id>/remove": [
        C(
            "/manage/studies/{study_id}/team/{member_id}/remove",
            get=NOT_GET,
            post={**_by_role(LOGIN, 404, 404, 404, 404, 404, 404), "lead": 302},
        ),
        C(
            "/manage/studies/{study_id}/team/{lead_member_id}/remove",
            get=NOT_GET,
            # The lead is the study's only lead: refused, back to the page with why; an admin
            # may (the study is still theirs to manage), and the next find nothing.
            post={**_by_role(LOGIN, 404, 404, 404, 302, 404, 404), "lead": 302},
        ),
    ],
    "manage/training/": [
        C(
            "/manage/training/?study={study_id}",
            get=ADMINS,
            post=ADMINS_REDIRECT,
            data=lambda world, role: {
                "study": world["study_id"],
                "action": "settings",
                "pass_mean_abs_diff": 0.75,
                "pass_max_diff": 2,
                "retest_count": 1,
                "retest_gap": 3,
            },
        ),
        C("/manage/training/?study={practice_study_id}", get=ADMINS),
    ],
    "manage/top-up/": [
        C(
            "/manage/top-up/?study={study_id}",
            get=ADMINS,
            post=ADMINS_REDIRECT,
            data=lambda world, role: {"study": world["study_id"]},
        )
    ],
    "manage/time-on-task/": [C("/manage/time-on-task/?study={study_id}", get=ADMINS)],
    # An invalid form (no events) is the page again: nothing is registered by the walk.
    "manage/webhooks/": [C("/manage/webhooks/", get=ADMINS, post=ADMINS)],
    "manage/webhooks/<int:pk>/": [C("/manage/webhooks/{webhook_id}/", get=ADMINS)],
    "manage/webhooks/<int:pk>/toggle": [
        C("/manage/webhooks/{webhook_id}/toggle", get=NOT_GET, post=ADMINS_REDIRECT)
    ],
    # The first admin deletes it; the next ones find nothing to delete.
    "manage/webhooks/<int:pk>/delete": [
        C(
            "/manage/webhooks/{webhook_id}/delete",
            get=NOT_GET,
            post=(LOGIN, 403, 403, 403, 302, 404, 404),
        )
    ],
    # The link itself is the credential: anyone holding it may open it (it redirects to a
    # session-bound URL that hides the token).
    "accounts/set-password/<uidb64>/<token>/": [
        C("/accounts/set-password/{uidb64}/{reset_token}/", get=_by_role(*[302] * 7))
    ],
    "accounts/set-password/done/": [C("/accounts/set-password/done/", get=EVERYONE_200)],
    # A study's consent text, for its own clinicians when it has one (this study asks none).
    "rate/consent/<int:study_id>/": [
        C(
            "/rate/consent/{study_id}/",
            get=(LOGIN, 404, 404, 403, 404, 404, 404),
            post=(LOGIN, 404, 404, 403, 404, 404, 404),
        ),
        # A study that asks consent, of the clinician who holds work in it (the page the
        # browser walk then checks at 360 and 1280 px).
        C("/rate/consent/{consent_study_id}/", get=(LOGIN, 200, 404, 403, 404, 404, 404)),
    ],
    # Each clinician's own credentials; accounts without a clinician record have none.
    "rate/credentials/": [
        C(
            "/rate/credentials/",
            get=(LOGIN, 200, 200, 403, 404, 404, 404),
            post=(LOGIN, 200, 200, 403, 404, 404, 404),
        )
    ],
    # In every e-mail: public (the signed token is the key); a token that is not one is 404.
    "mail/unsubscribe/<str:token>/": [
        C("/mail/unsubscribe/not-a-token/", get=NOWHERE, post=NOWHERE)
    ],
    "analysis/": [C("/analysis/", get=RESEARCHERS)],
    "analysis/studies/<int:study_id>/": [C("/analysis/studies/{study_id}/", get=RESEARCHERS)],
    "analysis/studies/<int:study_id>/tables/<slug:name>.csv": [
        C("/analysis/studies/{study_id}/tables/reliability.csv", get=RESEARCHERS)
    ],
    "analysis/studies/<int:study_id>/ratings.csv": [
        C("/analysis/studies/{study_id}/ratings.csv", get=RESEARCHERS)
    ],
    # Clinicians by name: admins only.
    "analysis/studies/<int:study_id>/release/": [
        C("/analysis/studies/{study_id}/release/", get=RESEARCHERS)
    ],
    # Starting the release job (a refused one, so that the walk builds no zip, is a redirect too).
    "analysis/studies/<int:study_id>/release/start": [
        C(
            "/analysis/studies/{study_id}/release/start",
            get=NOT_GET,
            post=(LOGIN, 403, 403, 302, 302, 302, 302),
        )
    ],
    "analysis/jobs/": [C("/analysis/jobs/", get=RESEARCHERS)],
    # A job is its owner's: everyone else who may read analyses gets 404.
    "analysis/jobs/<uuid:job_id>/": [
        C("/analysis/jobs/{job_id}/", get=(LOGIN, 403, 403, 200, 404, 404, 404))
    ],
    "analysis/jobs/<uuid:job_id>/cancel": [
        C(
            "/analysis/jobs/{job_id}/cancel",
            get=NOT_GET,
            post=(LOGIN, 403, 403, 302, 404, 404, 404),
        )
    ],
    # The walk's job kept no file: nobody downloads it.
    "analysis/jobs/<uuid:job_id>/download": [
        C("/analysis/jobs/{job_id}/download", get=(LOGIN, 403, 403, 404, 404, 404, 404))
    ],
    # The study's adjudicators and platform admins (the world has no adjudicator: a study
    # membership, tested in tests/annotation/test_adjudication.py); the world's clinicians agree
    # on everything, so a save names no disputed attribute (400, nothing written).
    "adjudicate/": [C("/adjudicate/", get=ADMINS)],
    # The queue: also the study's lead (told of escalations), read-only; a researcher passes the
    # gate a lead passes, then finds no such study.
    "adjudicate/<int:study_id>/": [
        C(
            "/adjudicate/{study_id}/",
            get={**_by_role(LOGIN, 403, 403, 404, 200, 200, 200), "lead": 200},
        )
    ],
    # A decision on the world's escalation: admins close it (the same decision again changes
    # nothing), back to the response's page; the lead reads the queue but decides nothing.
    "adjudicate/<int:study_id>/escalations/<int:escalation_id>/": [
        C(
            "/adjudicate/{study_id}/escalations/{escalation_id}/",
            get=NOT_GET,
            post={**_by_role(LOGIN, 403, 403, 403, 302, 302, 302), "lead": 403},
            data=lambda world, role: {"decision": "not_unsafe", "note": "reviewed"},
        )
    ],
    "adjudicate/<int:study_id>/<int:response_id>/": [
        C(
            "/adjudicate/{study_id}/{response_id}/",
            get=ADMINS,
            post=(LOGIN, 403, 403, 403, 400, 400, 400),
            data=lambda world, role: {"attribute": world["attribute_id"], "score": 3},
        )
    ],
    # The same for a distortion study's labels: the world's one clinician labelled the message
    # alone, so nothing is disputed and a save is refused (400, nothing written).
    "adjudicate/<int:study_id>/labels/": [C("/adjudicate/{label_study_id}/labels/", get=ADMINS)],
    "adjudicate/<int:study_id>/labels/<int:conversation_id>/": [
        C(
            "/adjudicate/{label_study_id}/labels/{label_conversation_id}/",
            get=ADMINS,
            post=(LOGIN, 403, 403, 403, 400, 400, 400),
            data=lambda world, role: {"dominant": world["label"]},
        )
    ],
    "analysis/studies/<int:study_id>/final-scores.csv": [
        C("/analysis/studies/{study_id}/final-scores.csv", get=RESEARCHERS)
    ],
    "analysis/studies/<int:study_id>/retest/": [
        C("/analysis/studies/{study_id}/retest/", get=ADMINS)
    ],
    "analysis/studies/<int:study_id>/judge-assisted/": [
        C("/analysis/studies/{study_id}/judge-assisted/", get=RESEARCHERS),
        C("/analysis/studies/{study_id}/judge-assisted/?judge=walk-judge", get=RESEARCHERS),
    ],
    "analysis/distortions/kappa-f1/": [
        C("/analysis/distortions/kappa-f1/", get=RESEARCHERS, post=RESEARCHERS)
    ],
    "analysis/distortions/<int:study_id>/": [
        C("/analysis/distortions/{label_study_id}/", get=RESEARCHERS)
    ],
    "analysis/distortions/<int:study_id>/tables/<slug:name>.csv": [
        C("/analysis/distortions/{label_study_id}/tables/fleiss.csv", get=RESEARCHERS)
    ],
    "analysis/distortions/<int:study_id>/runs/<int:run_id>/labels.csv": [
        C("/analysis/distortions/{label_study_id}/runs/{run_id}/labels.csv", get=RESEARCHERS)
    ],
    "judging/": [C("/judging/", get=ADMINS)],
    # Empty launch forms: the form again with its errors, and nothing launched.
    "judging/runs/new/judge/": [C("/judging/runs/new/judge/", get=ADMINS, post=ADMINS)],
    "judging/runs/new/generation/": [C("/judging/runs/new/generation/", get=ADMINS, post=ADMINS)],
    "judging/runs/new/labelling/": [C("/judging/runs/new/labelling/", get=ADMINS, post=ADMINS)],
    "judging/runs/preview/<str:kind>/": [
        C("/judging/runs/preview/judge/?study={study_id}", get=ADMINS)
    ],
    # The launch form's live estimate (htmx): an empty form says what to choose.
    "judging/runs/estimate/<str:kind>/": [
        C("/judging/runs/estimate/judge/?study={study_id}", get=ADMINS)
    ],
    "judging/runs/<int:pk>/": [C("/judging/runs/{run_id}/", get=ADMINS)],
    "judging/runs/<int:pk>/ratings.csv": [C("/judging/runs/{run_id}/ratings.csv", get=ADMINS)],
    "judging/studies/<int:study_id>/runs/": [C("/judging/studies/{study_id}/runs/", get=ADMINS)],
    "judging/runs/<int:pk>/cancel": [
        C("/judging/runs/{run_id}/cancel", get=NOT_GET, post=ADMINS_REDIRECT)
    ],
    "judging/runs/<int:pk>/resume": [
        C("/judging/runs/{run_id}/resume", get=NOT_GET, post=ADMINS_REDIRECT)
    ],
    "judging/runs/<int:pk>/retry": [
        C("/judging/runs/{run_id}/retry", get=NOT_GET, post=ADMINS_REDIRECT)
    ],
    # Endpoints: every admin sees them and may test one (as they may launch runs on it);
    # adding and changing need Django's model permissions (here: the superuser's). Empty forms
    # come back with their errors, nothing saved.
    "judging/endpoints/": [C("/judging/endpoints/", get=ADMINS)],
    "judging/endpoints/new/": [
        C("/judging/endpoints/new/", get=ENDPOINT_MANAGERS, post=ENDPOINT_MANAGERS)
    ],
    "judging/endpoints/<int:pk>/": [
        C("/judging/endpoints/{endpoint_id}/", get=ENDPOINT_MANAGERS, post=ENDPOINT_MANAGERS)
    ],
    "judging/endpoints/<int:pk>/enabled": [
        C(
            "/judging/endpoints/{endpoint_id}/enabled",
            get=NOT_GET,
            post=(LOGIN, 403, 403, 403, 403, 403, REDIRECT),
        )
    ],
    # The fixture's endpoint has no key: the test answers "no API key" and sends nothing.
    "judging/endpoints/<int:pk>/test": [
        C("/judging/endpoints/{endpoint_id}/test", get=NOT_GET, post=ADMINS)
    ],
    # The schema describes the API's shape, no data.
    "api/schema/": [C("/api/schema/", get=EVERYONE_200)],
    "api/docs/": [C("/api/docs/", get=EVERYONE_200)],
    # The API root lists the endpoints' addresses (no data) to anyone signed in.
    "api/": [C("/api/", get=(401, 200, 200, 200, 200, 200, 200))],
    "api/<drf_format_suffix:format>": [C("/api/.json", get=(401, 200, 200, 200, 200, 200, 200))],
    "api/studies/$": [C("/api/studies/", get=API)],
    "api/studies\\.(?P<format>[a-z0-9]+)/?$": [C("/api/studies.json", get=API)],
    "api/studies/(?P<pk>[^/.]+)/$": [C("/api/studies/{study_id}/", get=API)],
    "api/studies/(?P<pk>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": [
        C("/api/studies/{study_id}.json", get=API)
    ],
    "api/studies/(?P<pk>[^/.]+)/export/$": [C("/api/studies/{study_id}/export/", get=API)],
    "api/studies/(?P<pk>[^/.]+)/export\\.(?P<format>[a-z0-9]+)/?$": [
        C("/api/studies/{study_id}/export.json", get=API)
    ],
    "api/studies/(?P<pk>[^/.]+)/reports/(?P<table>[a-z_]+)/$": [
        C("/api/studies/{study_id}/reports/reliability/", get=API)
    ],
    "api/studies/(?P<pk>[^/.]+)/reports/(?P<table>[a-z_]+)\\.(?P<format>[a-z0-9]+)/?$": [
        C("/api/studies/{study_id}/reports/reliability.json", get=API)
    ],
    "api/studies/(?P<pk>[^/.]+)/final-scores/$": [
        C("/api/studies/{study_id}/final-scores/", get=API)
    ],
    "api/studies/(?P<pk>[^/.]+)/final-scores\\.(?P<format>[a-z0-9]+)/?$": [
        C("/api/studies/{study_id}/final-scores.json", get=API)
    ],
    "api/studies/<int:pk>/judge-assisted/": [
        C("/api/studies/{study_id}/judge-assisted/?judge=walk-judge", get=API)
    ],
    "api/ratings/$": [C("/api/ratings/", get=API)],
    "api/ratings\\.(?P<format>[a-z0-9]+)/?$": [C("/api/ratings.json", get=API)],
    "api/ratings/(?P<pk>[^/.]+)/$": [C("/api/ratings/{rating_id}/", get=API)],
    "api/ratings/(?P<pk>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": [
        C("/api/ratings/{rating_id}.json", get=API)
    ],
    # Jobs: the list is each person's own; the walk's job is the researcher's (404 to others);
    # the job kept no file (404 for its download).
    "api/jobs/$": [C("/api/jobs/", get=API, post=API_NOT_POST)],
    # A release takes JSON only: the walk's form POST is an unsupported media type. κ_F1 takes
    # multipart, which the walk sends, without the file (400).
    "api/jobs/release/$": [
        C("/api/jobs/release/", get=API_NOT_GET, post=(401, 403, 403, 415, 415, 415, 415))
    ],
    "api/jobs/release\\.(?P<format>[a-z0-9]+)/?$": [
        C("/api/jobs/release.json", get=API_NOT_GET, post=(401, 403, 403, 415, 415, 415, 415))
    ],
    "api/jobs/kappa-f1/$": [
        C("/api/jobs/kappa-f1/", get=API_NOT_GET, post=(401, 403, 403, 400, 400, 400, 400))
    ],
    "api/jobs/kappa-f1\\.(?P<format>[a-z0-9]+)/?$": [
        C("/api/jobs/kappa-f1.json", get=API_NOT_GET, post=(401, 403, 403, 400, 400, 400, 400))
    ],
    "api/jobs\\.(?P<format>[a-z0-9]+)/?$": [C("/api/jobs.json", get=API)],
    JOB + "/$": [C("/api/jobs/{job_id}/", get=API_OWN)],
    JOB + FORMAT: [C("/api/jobs/{job_id}.json", get=API_OWN)],
    JOB + "/cancel/$": [C("/api/jobs/{job_id}/cancel/", get=API_NOT_GET, post=API_OWN)],
    JOB + "/cancel" + FORMAT: [C("/api/jobs/{job_id}/cancel.json", get=API_NOT_GET, post=API_OWN)],
    JOB + "/download/$": [C("/api/jobs/{job_id}/download/", get=API_NO_FILE)],
    JOB + "/download" + FORMAT: [C("/api/jobs/{job_id}/download.json", get=API_NO_FILE)],
    "api/label-annotations/$": [C("/api/label-annotations/", get=API)],
    "api/label-annotations\\.(?P<format>[a-z0-9]+)/?$": [C("/api/label-annotations.json", get=API)],
    "api/label-annotations/(?P<pk>[^/.]+)/$": [
        C("/api/label-annotations/{label_annotation_id}/", get=API)
    ],
    "api/label-annotations/(?P<pk>[^/.]+)\\.(?P<format>[a-z0-9]+)/?$": [
        C("/api/label-annotations/{label_annotation_id}.json", get=API)
    ],
}

# Django admin: a sample (see the module docstring). Only staff get in at all; staff without
# model permissions see the index but no model (403); a superuser sees everything.
DJANGO_ADMIN = (ADMIN_LOGIN, ADMIN_LOGIN, ADMIN_LOGIN, ADMIN_LOGIN, ADMIN_LOGIN, 200, 200)
DJANGO_ADMIN_MODEL = (ADMIN_LOGIN, ADMIN_LOGIN, ADMIN_LOGIN, ADMIN_LOGIN, ADMIN_LOGIN, 403, 200)
ADMIN_SAMPLE: dict[str, list[Case]] = {
    "admin/": [C("/admin/", get=DJANGO_ADMIN)],
    # To the platform's sign-in (with its second factor); signed-in non-staff are refused.
    "admin/login/": [C("/admin/login/", get=(LOGIN, 403, 403, 403, 403, 302, 302))],
    "admin/auth/user/": [C("/admin/auth/user/", get=DJANGO_ADMIN_MODEL)],
    "admin/auth/user/<id>/password/": [
        C("/admin/auth/user/{superuser_id}/password/", get=DJANGO_ADMIN_MODEL)
    ],
    "admin/auth/user/<path:object_id>/change/": [
        C("/admin/auth/user/{superuser_id}/change/", get=DJANGO_ADMIN_MODEL)
    ],
    "admin/judging/modelendpoint/": [C("/admin/judging/modelendpoint/", get=DJANGO_ADMIN_MODEL)],
    "admin/judging/modelendpoint/<path:object_id>/change/": [
        C("/admin/judging/modelendpoint/{endpoint_id}/change/", get=DJANGO_ADMIN_MODEL)
    ],
    "admin/knox/authtoken/": [C("/admin/knox/authtoken/", get=DJANGO_ADMIN_MODEL)],
    "admin/annotation/study/": [C("/admin/annotation/study/", get=DJANGO_ADMIN_MODEL)],
}


def _routes(patterns=None, prefix: str = "", admin: bool = False):
    """(route, is Django admin) for every pattern, as `resolve(path).route` spells it."""
    for p in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(p, URLResolver):
            inside_admin = admin or p.namespace == "admin"
            yield from _routes(p.url_patterns, _join(prefix, str(p.pattern)), inside_admin)
        elif isinstance(p, URLPattern):
            yield _join(prefix, str(p.pattern)), admin


def _join(prefix: str, pattern: str) -> str:
    # As Django's resolver joins routes (a regex's leading ^ goes).
    return prefix + pattern.removeprefix("^")


ALL_ROUTES = list(_routes())


def test_every_url_pattern_has_an_expectation():
    missing = [route for route, admin in ALL_ROUTES if not admin and route not in EXPECTED]
    assert not missing, (
        "URL patterns with no access expectation — add each to EXPECTED in "
        f"tests/test_url_access.py, saying who may open it: {missing}"
    )
    stale = set(EXPECTED) - {route for route, admin in ALL_ROUTES if not admin}
    assert not stale, f"EXPECTED names patterns that no longer exist: {sorted(stale)}"
    assert any(admin for _, admin in ALL_ROUTES) and ADMIN_SAMPLE


@pytest.fixture(scope="module")
def world_module(django_db_setup, django_db_blocker) -> Iterator[dict]:
    """`world`, built once for this module inside a transaction rolled back at its end; each
    test runs in a savepoint within it, so what one test's requests change, the next never sees.
    """
    with django_db_blocker.unblock(), transaction.atomic():
        yield world_build()
        transaction.set_rollback(True)


@pytest.fixture
def world(world_module, db) -> dict:
    """A small real study, each kind of user, and the ids and tokens that fill URL parameters."""
    return world_module


def world_build() -> dict:
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken

    from accounts.roles import ADMIN, CLINICIAN, RESEARCHER, role_add
    from annotation.membership import CLINICIAN as CLINICIAN_MEMBER
    from annotation.membership import LEAD, MEMBER_RESEARCHER, member_add
    from annotation.models import (
        Assignment,
        AssignmentItem,
        Conversation,
        Escalation,
        Rater,
        Rating,
        ReferenceScore,
        Response,
        Score,
        Study,
    )
    from annotation.services import (
        assignments_create,
        label_annotation_save,
        rating_save,
        study_get_or_create,
    )
    from annotation.services.consent import consent_text_publish
    from judging.models import ModelEndpoint, Run
    from tests.factories import study_make

    def user(name: str, role: str | None = None, **flags):
        # No password: every test signs in with force_login (password hashing is slow).
        u = get_user_model().objects.create_user(username=name, password=None, **flags)
        if role:
            role_add(user=u, role=role)
        return u

    users = {
        # A lead and researcher of another study only (ROLES' seventh kind, checked on its own
        # in test_url_access_for_another_studys_team): nothing of this world is theirs.
        "outsider": user("walk-outsider"),
        "clinician": user("walk-clinician", CLINICIAN),
        "other": user("walk-other", CLINICIAN),
        "researcher": user("walk-researcher", RESEARCHER),
        "admin": user("walk-admin", ADMIN),
        "staff": user("walk-staff", is_staff=True),
        "superuser": user("walk-root", is_staff=True, is_superuser=True),
        "lead": user("walk-lead"),
    }
    invitee = user("walk-invitee", CLINICIAN)
    clinician = Rater.objects.create(
        kind=Rater.Kind.CLINICIAN, name="walk-clinician", user=users["clinician"]
    )
    other = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="walk-other", user=users["other"])
    study = study_make(name="Walk study", conversations=1)
    (assignment,) = assignments_create(
        study=study, clinicians=[clinician], seed_rng=random.Random(1)
    )
    item = assignment.items.order_by("position").first()
    attribute = study.rubric.attributes.order_by("position").first()
    rating_save(
        assignment=assignment,
        item_token=item.token,
        user=users["clinician"],
        attribute_id=attribute.pk,
        score=3,
    )
    lead = member_add(study=study, user=users["lead"], role=LEAD)
    member = member_add(study=study, user=user("walk-member"), role=CLINICIAN_MEMBER, site="A")
    label_study, _ = study_get_or_create(
        name="Walk distortions", kind=Study.Kind.DISTORTION_LABELLING
    )

    Conversation.objects.create(study=label_study, external_id="m0", context="I always fail.")
    (label_assignment,) = assignments_create(study=label_study, clinicians=[clinician])
    label = label_study.distortion_labels.order_by("position").first().name
    label_annotation_save(
        assignment=label_assignment, user=users["clinician"], labels=[label], edited_ms=None
    )
    endpoint = ModelEndpoint.objects.create(
        name="walk-endpoint", provider="openai", model="fake", family="fake"
    )
    judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name="walk-judge")
    # The judge-assisted page and API need the chosen judge to have scored the study.
    judged = Rating.objects.create(
        rater=judge, response=item.response, status=Rating.Status.COMPLETE,
        source=Rating.Source.IMPORT,
    )  # fmt: skip
    Score.objects.create(rating=judged, attribute=attribute, value=4)
    run = Run.objects.create(
        study=label_study,
        endpoint=endpoint,
        rater=judge,
        kind="labelling",
        repeats=5,
        temperature=0.5,
        status=Run.Status.CANCELLED,
    )
    # A training study: one practice conversation with references, submitted by the clinician.
    practice_study = study_make(name="Walk training", conversations=1)
    Conversation.objects.filter(study=practice_study).update(practice=True)
    practice_response = Response.objects.filter(conversation__study=practice_study).first()
    ReferenceScore.objects.create(response=practice_response, attribute=attribute, value=3)
    practice = Assignment.objects.create(
        rater=clinician,
        conversation=practice_response.conversation,
        kind=Assignment.Kind.PRACTICE,
        status=Assignment.Status.SUBMITTED,
    )
    AssignmentItem.objects.create(assignment=practice, response=practice_response, position=0)
    practice_rating = Rating.objects.create(
        rater=clinician, response=practice_response, assignment=practice,
        status=Rating.Status.COMPLETE, source=Rating.Source.FORM,
    )  # fmt: skip
    Score.objects.create(rating=practice_rating, attribute=attribute, value=4)
    # The API lists finished work; drafts only on request (and that rule is not this test's).
    assignment.ratings.update(status="complete")
    label_assignment.label_annotations.update(status="complete")
    token, _ = AuthToken.objects.create(user=users["researcher"])
    from analysis.models import Job
    from annotation.models import Webhook

    webhook = Webhook.objects.create(url="https://lab.example/", events=["run.finished"])
    # The researcher's finished job (no file kept): only its owner finds it.
    job = Job.objects.create(
        owner=users["researcher"], kind=Job.Kind.KAPPA_F1, digest="walk", state=Job.State.DONE
    )
    consent_study = study_make(name="Walk consent", conversations=1)
    assignments_create(study=consent_study, clinicians=[clinician], seed_rng=random.Random(2))
    consent_text_publish(
        study=consent_study, text="I agree that my ratings are used for research, unnamed."
    )
    outside = study_make(name="Outside study", conversations=1)
    member_add(study=outside, user=users["outsider"], role=LEAD, site="Elsewhere")
    member_add(study=outside, user=users["outsider"], role=MEMBER_RESEARCHER)
    escalation = Escalation.objects.create(
        study=study,
        response=item.response,
        assignment=assignment,
        rater=clinician,
        reason="walk: unsafe advice",
    )
    # Reclaim needs stale work: make the assignment look long untouched.
    Assignment.objects.filter(pk=assignment.pk).update(
        last_activity_at=None, created_at=assignment.created_at.replace(year=2000)
    )
    return {
        "users": users,
        "token": assignment.token,
        "label_token": label_assignment.token,
        "practice_token": practice.token,
        "practice_study_id": practice_study.pk,
        "consent_study_id": consent_study.pk,
        "item_token": item.token,
        "attribute_id": attribute.pk,
        "response_id": item.response_id,
        "label": label,
        "study_id": study.pk,
        "job_id": job.pk,
        "webhook_id": webhook.pk,
        "escalation_id": escalation.pk,
        "label_study_id": label_study.pk,
        "label_conversation_id": label_assignment.conversation_id,
        "assignment_id": assignment.pk,
        "member_id": member.pk,
        "lead_member_id": lead.pk,
        "clinician_rater_id": clinician.pk,
        "other_rater_id": other.pk,
        "clinician_user_id": users["clinician"].pk,
        "researcher_id": users["researcher"].pk,
        "admin_id": users["admin"].pk,
        "staff_id": users["staff"].pk,
        "superuser_id": users["superuser"].pk,
        # For an account nobody signs in to here (signing in would void the link).
        "uidb64": urlsafe_base64_encode(force_bytes(invitee.pk)),
        "reset_token": password_token_generator.make_token(invitee),
        "uidb36": int_to_base36(invitee.pk),
        "run_id": run.pk,
        "endpoint_id": endpoint.pk,
        "token_digest": token.digest,
        "rating_id": assignment.ratings.get().pk,
        "label_annotation_id": label_assignment.label_annotations.get().pk,
    }


def _check(response, expected, *, role: str, method: str, url: str) -> None:
    where = f"{method} {url} as {role}"
    if expected in (LOGIN, ADMIN_LOGIN, REDIRECT):
        assert response.status_code == 302, f"{where}: {response.status_code}, expected 302"
        location = response["Location"]
        if expected == LOGIN:
            assert location.startswith("/accounts/login/"), f"{where}: to {location}"
        elif expected == ADMIN_LOGIN:
            assert location.startswith("/admin/login/"), f"{where}: to {location}"
        else:
            assert "login/" not in location, f"{where}: to {location}"
    else:
        assert response.status_code == expected, (
            f"{where}: {response.status_code}, expected {expected}"
        )


def _walk(world: dict, route: str, cases: list[Case]) -> None:
    for case in cases:
        url = case.url.format(**world)
        resolved = resolve(url.split("?")[0]).route
        assert resolved == route, f"{url} resolves to {resolved!r}, not the pattern {route!r}"
        for method, expected in (("GET", case.get), ("POST", case.post)):
            if expected is None:
                continue
            # Least to most privileged: a refused write leaves the data as is.
            for role in (r for r in WALK_ORDER if r in expected):
                client = Client()
                if role != "anonymous":
                    client.force_login(world["users"][role])
                if method == "GET":
                    response = client.get(url)
                else:
                    response = client.post(url, case.data(world, role))
                _check(response, expected[role], role=role, method=method, url=url)


@pytest.mark.parametrize("route", sorted(EXPECTED))
def test_url_access(world, route):
    _walk(world, route, EXPECTED[route])


@pytest.mark.parametrize("route", sorted(ADMIN_SAMPLE))
def test_django_admin_access_sample(world, route):
    for case in ADMIN_SAMPLE[route]:
        url = case.url.format(**world)
        resolve(url)  # a real admin URL
        for role in ROLES:
            client = Client()
            if role != "anonymous":
                client.force_login(world["users"][role])
            _check(client.get(url), case.get[role], role=role, method="GET", url=url)


# What names the world's studies: none of it may reach a member of another study.
WORLD_STUDIES = ("Walk study", "Walk distortions", "Walk training", "Walk consent")
STUDY_PARAMETERS = ("{study_id}", "{label_study_id}", "{practice_study_id}", "{consent_study_id}")


def _outsider_check(
    response, researcher_expected, *, world: dict, method: str, url: str, case: Case
) -> None:
    """A lead and researcher of another study is a researcher wherever the platform asks for
    the role at all, and is shown nothing of a study they are not on: where the platform-wide
    researcher is answered, they get 404 for a URL naming one of the world's studies (or
    another person's object), and otherwise an answer with none of those studies in it."""
    where = f"{method} {url} as a member of another study"
    if researcher_expected not in (200, 302, REDIRECT):
        _check(response, researcher_expected, role="outsider", method=method, url=url)
        return
    if any(parameter in case.url for parameter in STUDY_PARAMETERS):
        assert response.status_code in (403, 404), f"{where}: {response.status_code}"
        return
    assert response.status_code in (200, 302, 403, 404), f"{where}: {response.status_code}"
    body = b"".join(response.streaming_content) if response.streaming else response.content
    text = body.decode("utf-8", "replace")
    leaked = [name for name in WORLD_STUDIES if name in text]
    assert not leaked, f"{where}: shows {leaked}"
    if not response.get("Content-Type", "").startswith("application/json"):
        return
    answer = response.json()
    rows = answer.get("results", []) if isinstance(answer, dict) else answer
    world_ids = {world[key] for key in ("study_id", "label_study_id", "practice_study_id")}
    world_ids.add(world["consent_study_id"])
    for row in rows if isinstance(rows, list) else []:
        shown = row.get("study") if "study" in row else row.get("id") if "/studies" in url else None
        assert shown not in world_ids, f"{where}: lists a row of study {shown}"


@pytest.mark.parametrize("route", sorted(EXPECTED))
def test_url_access_for_another_studys_team(world, route):
    """EXPECTED's researcher column, walked again by the lead and researcher of another study."""
    for case in EXPECTED[route]:
        url = case.url.format(**world)
        for method, expected in (("GET", case.get), ("POST", case.post)):
            if expected is None:
                continue
            client = Client()
            client.force_login(world["users"]["outsider"])
            if method == "GET":
                response = client.get(url)
            else:
                response = client.post(url, case.data(world, "researcher"))
            _outsider_check(
                response, expected["researcher"], world=world, method=method, url=url, case=case
            )
