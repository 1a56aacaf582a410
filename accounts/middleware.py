"""Session rules for shared ward computers and privileged accounts.

IdleTimeoutMiddleware signs out a session that made no request for SESSION_IDLE_HOURS.
TwoFactorRequiredMiddleware lets staff and members of the *admin* group use the platform only in
a session signed in with a second factor: without an authenticator they are sent to enrol one
(TOTP, with recovery codes), with one but in a session that never used it they are signed out.
"""

import time

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import redirect

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
