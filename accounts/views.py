"""A researcher's own API tokens (create: the token is shown once; revoke), the sign-in log
for admins, and a read-only page of the account's e-mail address."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from annotation.roles import ADMIN, RESEARCHER, AuthenticatedHttpRequest, role_required

from .forms import TokenCreateForm
from .selectors import (
    SIGNIN_LOG_SHOWN,
    api_tokens_live,
    signin_events_recent,
    two_factor_required,
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
        "second_factor_required": two_factor_required(request.user),
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
