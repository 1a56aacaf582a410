"""A researcher's own API tokens (create: the token is shown once; revoke), the sign-in log
for admins, a read-only page of the account's e-mail address, and allauth's password pages
behind re-authentication with the second factor."""

from collections.abc import Callable
from functools import wraps

from allauth.account import views as allauth_views
from allauth.core.exceptions import ReauthenticationRequired
from allauth.mfa.recovery_codes import views as recovery_views
from allauth.mfa.totp import views as totp_views
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from .forms import TokenCreateForm
from .roles import ADMIN, RESEARCHER, AuthenticatedHttpRequest, role_required
from .selectors import (
    SIGNIN_LOG_SHOWN,
    api_tokens_live,
    can_reauthenticate,
    enrolment_next_url,
    reauthenticated_recently,
    signed_in_recently,
    signin_events_recent,
    two_factor_required,
    user_has_totp,
)
from .services import TokenError, api_token_create, api_token_revoke


@never_cache  # the creating response carries the raw token: no cache may keep it
@role_required(RESEARCHER)
def tokens(request: HttpRequest) -> HttpResponse:
    form = TokenCreateForm(request.POST or None)
    created = None
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                instance, raw = api_token_create(
                    user=request.user,
                    days=form.cleaned_data["days"],
                    name=form.cleaned_data["name"],
                )
            except TokenError as exc:
                form.add_error(None, str(exc))
                status = 422
            else:
                name = form.cleaned_data["name"]
                created = {"token": raw, "expiry": instance.expiry, "name": name}
                form = TokenCreateForm()
        else:
            status = 422
    context = {
        "form": form,
        "created": created,
        "second_factor_required": two_factor_required(user=request.user),
        "tokens": [
            # Only the first characters, enough to tell tokens apart, never the whole token.
            {
                "digest": t.digest,
                "hint": t.token_key[:6],
                "name": getattr(getattr(t, "token_name", None), "name", ""),
                "created": t.created,
                "expiry": t.expiry,
            }
            for t in api_tokens_live(user=request.user).select_related("token_name")
        ],
    }
    return render(request, "accounts/tokens.html", context, status=status)


@require_POST
@role_required(RESEARCHER)
def token_revoke(request: HttpRequest, digest: str) -> HttpResponse:
    if not api_token_revoke(user=request.user, digest=digest):
        raise Http404("no such token of yours")
    messages.success(request, "Token revoked: requests with it are refused from now on.")
    return redirect("accounts:tokens")


@role_required(ADMIN)
def sign_ins(request: HttpRequest) -> HttpResponse:
    events = list(signin_events_recent())
    return render(
        request,
        "accounts/sign_ins.html",
        {"events": events, "shown": SIGNIN_LOG_SHOWN, "days": settings.SIGNIN_LOG_DAYS},
    )


@login_required
@require_GET
def email(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The account's e-mail address, read-only, in place of allauth's page that lets a signed-in
    user add addresses unverified: one added by a stolen session would receive the next
    password link and keep the account after the session is gone. Admins set addresses."""
    return render(request, "accounts/email.html", {"email": request.user.email})


def _reauthenticated_with_second_factor(
    view: Callable[..., HttpResponse],
) -> Callable[..., HttpResponse]:
    """allauth's password pages, asking first what a stolen session does not have.

    - An account with an authenticator re-enters its code (not its password) when it has not
      in the last ACCOUNT_REAUTHENTICATION_TIMEOUT seconds: ReauthenticationRequired sends it to
      the code page, and allauth resumes the form it had posted once the code is given.
    - An account with neither a password nor an authenticator (single sign-on only) cannot
      re-authenticate here, so it sets no password itself (403 with what to do instead): a
      password set from a session alone would keep the account open after the identity provider
      closed it. An admin's set-password link still gives it one.
    - An account with a password and no authenticator changes it by typing the current one,
      which is its re-authentication.
    """

    @wraps(view)
    def wrapped(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        user = request.user
        if user.is_authenticated:
            if not can_reauthenticate(user=user):
                return render(request, "accounts/password_set_refused.html", status=403)
            if user_has_totp(user=user) and not reauthenticated_recently(
                request=request, user=user
            ):
                raise ReauthenticationRequired()
        return view(request, *args, **kwargs)

    return wrapped


password_change = _reauthenticated_with_second_factor(allauth_views.password_change)
password_set = _reauthenticated_with_second_factor(allauth_views.password_set)


class ActivateTotpView(totp_views.ActivateTOTPView):
    """allauth's enrolment page, saying why the account needs a second factor and what comes
    after; an account with nothing to re-authenticate with (single sign-on only) enrols only
    within minutes of signing in, like everyone else (allauth would take its session alone)."""

    def dispatch(self, request, *args, **kwargs):
        user = request.user
        if (
            user.is_authenticated
            and not can_reauthenticate(user=user)
            and not signed_in_recently(request=request, user=user)
        ):
            logout(request)
            messages.info(request, "Sign in again to add a second factor.")
            return redirect_to_login(request.get_full_path())
        return super().dispatch(request, *args, **kwargs)

    def get_context_data(self, **kwargs) -> dict:
        context = super().get_context_data(**kwargs)
        context["required"] = two_factor_required(user=self.request.user)
        return context


class RecoveryCodesView(recovery_views.ViewRecoveryCodesView):
    """allauth's recovery codes page with the way on: the page the account was going to when it
    was sent to enrol (kept by the second-factor gate), else the home page."""

    def get_context_data(self, **kwargs) -> dict:
        context = super().get_context_data(**kwargs)
        context["continue_url"] = enrolment_next_url(request=self.request)
        return context


activate_totp = ActivateTotpView.as_view()
recovery_codes = RecoveryCodesView.as_view()
