"""Session rules for shared ward computers and privileged accounts.

IdleTimeoutMiddleware signs out a session that made no request for SESSION_IDLE_HOURS.
HtmxSignInMiddleware turns "sign in first" into something the rating page can act on.
TwoFactorRequiredMiddleware is the second factor's one gate for sessions (the API's tokens have
theirs in accounts.authentication): an account with an authenticator is used only from a
session that passed it, whatever the path, and staff and members of the *admin* group without
one are sent to enrol one (TOTP, with recovery codes). The rule is
accounts.selectors.second_factor_gate.
"""

import time
from urllib.parse import quote, urlsplit

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect, resolve_url
from django_htmx.http import HttpResponseClientRedirect

from .selectors import ENROLMENT_NEXT_SESSION_KEY, GATE_ENROL, GATE_SIGN_OUT, second_factor_gate

LAST_SEEN = "mentalbench_last_seen"
# Each request moves the idle clock; writing the session once a minute at most keeps autosave
# (a request every few seconds) from rewriting it each time.
LAST_SEEN_RESOLUTION_S = 60


class IdleTimeoutMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.user.is_authenticated:
            now = int(time.time())
            last = request.session.get(LAST_SEEN)
            if last is not None and now - int(last) > settings.SESSION_IDLE_HOURS * 3600:
                logout(request)
                return redirect_to_login(request.get_full_path())
            if last is None or now - int(last) >= LAST_SEEN_RESOLUTION_S:
                request.session[LAST_SEEN] = now
        return self.get_response(request)


class HtmxSignInMiddleware:
    """An htmx request (an autosave) that must sign in first gets 401 and HX-Redirect to the
    sign-in page, with the *page* as `next`, instead of a 302 that the browser would follow to
    the sign-in form: answered 200, the page would take its edit for saved and drop it. On 401
    the page keeps the edit in its journal and sends it after the next sign-in."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if request.headers.get("HX-Request") != "true" or response.status_code != 302:
            return response
        location = response.get("Location", "")
        login = resolve_url(settings.LOGIN_URL)
        if location.startswith(login):
            page = urlsplit(request.headers.get("HX-Current-URL", ""))
            back = page.path + (f"?{page.query}" if page.query else "") or request.path
            location = f"{login}?next={quote(back)}"
        elif not location.startswith(resolve_url("mfa_activate_totp")):
            return response
        # Sign in again, or enrol the second factor first: either way the edit waits.
        stopped = HttpResponseClientRedirect(location)
        stopped.status_code = 401
        return stopped


# Pages a privileged account that has no authenticator yet may still open: enrolment (and the
# password re-entry it asks for first) and signing out. They are open only while it has none:
# once it has one, these pages too belong to sessions that passed it.
ENROLMENT_PATHS = ("/accounts/2fa/", "/accounts/logout/", "/accounts/reauthenticate/")
STATIC_PATHS = ("/static/",)


class TwoFactorRequiredMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = request.user
        if user.is_authenticated and not request.path.startswith(STATIC_PATHS):
            verdict = second_factor_gate(request=request, user=user)
            if verdict == GATE_SIGN_OUT:
                # A session that never passed the account's authenticator: one signed in with
                # the password before the owner enrolled (elsewhere), one that passed an
                # authenticator since deleted, or one made around the sign-in page. Signed
                # out, whatever it asked for: the 2FA pages and re-authentication included,
                # or it could read the recovery codes or remove the factor.
                logout(request)
                return redirect_to_login(request.get_full_path())
            if verdict == GATE_ENROL and not request.path.startswith(ENROLMENT_PATHS):
                if request.method == "GET" and request.headers.get("HX-Request") != "true":
                    # Where the recovery codes page's "Continue" leads after enrolment.
                    request.session[ENROLMENT_NEXT_SESSION_KEY] = request.get_full_path()
                return redirect("mfa_activate_totp")
        return self.get_response(request)
