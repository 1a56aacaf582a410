"""API token authentication with a brake on guessing, behind the second factor's gate.

DRF's throttles run after authentication, so a request with a wrong token is refused before
any throttle sees it. This class counts failed token attempts per client address itself (with
DRF's rate format and cache-backed history) and, once the rate is spent, refuses every token
attempt from that address with 429 until the window has moved on.

A token is a way into its account like a session: the token of an account whose role requires a
second factor works only while that account has an authenticator enrolled (checked on every
request, so a token made before the rule, or for an account whose authenticator was since
removed, stops working until the account enrols).
"""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from knox.auth import TokenAuthentication
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header
from rest_framework.throttling import SimpleRateThrottle

from .selectors import two_factor_required, user_has_totp

TOKEN_NEEDS_SECOND_FACTOR = (
    "This account must sign in with a second factor, and has none: its API tokens work once "
    "it has enrolled an authenticator app at /accounts/2fa/."
)


class TokenFailureThrottle(SimpleRateThrottle):
    """Failed API token attempts per client address (REST_FRAMEWORK DEFAULT_THROTTLE_RATES
    "api_token_failures", e.g. "10/min")."""

    scope = "api_token_failures"
    # Set by SimpleRateThrottle.__init__ from the rate (djangorestframework-stubs leave them out).
    num_requests: int
    duration: int

    def get_cache_key(self, request, view) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def _history(self, request) -> list[float]:
        self.key = self.get_cache_key(request, None)
        self.now = self.timer()
        history = [t for t in self.cache.get(self.key, []) if t > self.now - self.duration]
        self.history = history
        return history

    def blocked(self, request) -> bool:
        return len(self._history(request)) >= self.num_requests

    def record_failure(self, request) -> None:
        history = self._history(request)
        history.insert(0, self.now)
        self.cache.set(self.key, history, self.duration)


class ApiTokenAuthentication(TokenAuthentication):
    """knox tokens (`Authorization: Token <token>`), throttled on failures."""

    def authenticate(self, request):
        throttle = TokenFailureThrottle()
        if not self._presents_token(request):
            return None  # session or anonymous requests are not this class's business
        if throttle.blocked(request):
            raise exceptions.Throttled(
                wait=throttle.wait(),
                detail="Too many failed API token attempts from this address; try again later.",
            )
        try:
            authenticated = super().authenticate(request)
        except exceptions.AuthenticationFailed:
            throttle.record_failure(request)
            raise
        if authenticated is not None:
            user, _ = authenticated
            if two_factor_required(user=user) and not user_has_totp(user=user):
                # A valid token, not a guess: 403, and no count against the address.
                raise exceptions.PermissionDenied(TOKEN_NEEDS_SECOND_FACTOR)
        return authenticated

    def _presents_token(self, request) -> bool:
        auth = get_authorization_header(request).split()
        return bool(auth) and auth[0].lower() == self.authenticate_header(request).lower().encode()


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Describes the token header in the OpenAPI schema (registered by being defined)."""

    target_class = "accounts.authentication.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Token"
        )
