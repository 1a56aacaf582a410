"""Session rules for shared ward computers and privileged accounts.

IdleTimeoutMiddleware signs out a session that made no request for SESSION_IDLE_HOURS.
HtmxSignInMiddleware turns "sign in first" into something the rating page can act on.
TwoFactorRequiredMiddleware lets staff and members of the *admin* group use the platform only in
a session signed in with a second factor: without an authenticator they are sent to enrol one
(TOTP, with recovery codes), with one but in a session that never used it they are signed out.
"""

import time
from urllib.parse import quote, urlsplit

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect, resolve_url
from django_htmx.http import HttpResponseClientRedirect

from .selectors import two_factor_required, two_factor_used, user_has_totp

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


# Pages a privileged account without a second factor may still open: enrolment (and what it
# needs), signing out, and static files.
ENROLMENT_PATHS = ("/accounts/2fa/", "/accounts/logout/", "/accounts/reauthenticate/", "/static/")


class TwoFactorRequiredMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = request.user
        if (
            user.is_authenticated
            and not request.path.startswith(ENROLMENT_PATHS)
            and two_factor_required(user)
            and not two_factor_used(request, user)
        ):
            if user_has_totp(user):
                # Signed in without the factor it has (a session from before the rule, or one
                # made around the sign-in page): sign in again, through the code prompt.
                logout(request)
                return redirect_to_login(request.get_full_path())
            return redirect("mfa_activate_totp")
        return self.get_response(request)
