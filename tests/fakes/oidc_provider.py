"""A small OpenID Connect provider for the tests: discovery, the authorization code flow with
PKCE (S256), ID tokens signed RS256 with a key made for the test run, JWKS and userinfo.

It signs everyone in as `subject` without asking (the identity provider's own sign-in page is
not what is tested), and refuses a token request whose code_verifier does not hash to the code's
challenge, whose code was already used, or whose client or redirect URI differ.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CLIENT_ID = "mentalbench-test"
CLIENT_SECRET = "oidc-test-client-secret"  # noqa: S105 - a test value


@dataclass
class Subject:
    sub: str = "hospital-0042"
    email: str = "dr.sso@hospital.example"
    preferred_username: str = "dr.sso"
    name: str = "Dr Sso"


@dataclass
class FakeOIDCProvider:
    subject: Subject = field(default_factory=Subject)
    # Set to sign ID tokens with a key the JWKS does not publish (a forged token).
    sign_with_unpublished_key: bool = False
    # Set to issue ID tokens for another client (the audience a client must check).
    audience: str = CLIENT_ID
    token_requests: list[dict[str, str]] = field(default_factory=list)
    issued_id_tokens: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = "test-key-1"
        self.codes: dict[str, dict[str, str]] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeOIDCProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def settings(self) -> dict[str, Any]:
        """SOCIALACCOUNT_PROVIDERS as mentalbench.settings builds it from SSO_OIDC_*."""
        return {
            "openid_connect": {
                "OAUTH_PKCE_ENABLED": True,
                "APPS": [
                    {
                        "provider_id": "hospital",
                        "name": "Hospital",
                        "client_id": CLIENT_ID,
                        "secret": CLIENT_SECRET,
                        "settings": {
                            "server_url": self.url,
                            "token_auth_method": "client_secret_post",
                        },
                    }
                ],
            }
        }

    # ------------------------------------------------------------------ protocol

    def _discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "userinfo_endpoint": f"{self.url}/userinfo",
            "jwks_uri": f"{self.url}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
        }

    def _jwks(self) -> dict[str, Any]:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def _authorize(self, query: dict[str, str]) -> str:
        """The redirect back to the client, with a code bound to this request's PKCE challenge."""
        if query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            raise ValueError("PKCE (S256) is required")
        code = secrets.token_urlsafe(16)
        self.codes[code] = query
        back = {"code": code, "state": query.get("state", "")}
        return f"{query['redirect_uri']}?{urlencode(back)}"

    def _token(self, form: dict[str, str]) -> dict[str, Any]:
        self.token_requests.append(form)
        request = self.codes.pop(form.get("code", ""), None)  # a code works once
        if request is None:
            raise ValueError("unknown or used code")
        verifier = form.get("code_verifier", "")
        digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        if digest.rstrip(b"=").decode() != request["code_challenge"]:
            raise ValueError("code_verifier does not match the challenge")
        if (form.get("client_id"), form.get("client_secret")) != (CLIENT_ID, CLIENT_SECRET):
            raise ValueError("wrong client")
        if form.get("redirect_uri") != request["redirect_uri"]:
            raise ValueError("wrong redirect_uri")
        now = int(time.time())
        claims = {
            "iss": self.url,
            "sub": self.subject.sub,
            "aud": self.audience,
            "iat": now,
            "exp": now + 300,
            "email": self.subject.email,
            "email_verified": True,
            "preferred_username": self.subject.preferred_username,
            "name": self.subject.name,
        }
        if request.get("nonce"):
            claims["nonce"] = request["nonce"]
        key = self.other_key if self.sign_with_unpublished_key else self.key
        id_token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": self.kid})
        self.issued_id_tokens.append(id_token)
        return {
            "access_token": secrets.token_urlsafe(16),
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": id_token,
        }

    def _userinfo(self) -> dict[str, Any]:
        s = self.subject
        return {
            "sub": s.sub,
            "email": s.email,
            "email_verified": True,
            "preferred_username": s.preferred_username,
            "name": s.name,
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parsed = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(parsed.query).items()}
                if parsed.path == "/.well-known/openid-configuration":
                    self._json(200, provider._discovery())
                elif parsed.path == "/jwks":
                    self._json(200, provider._jwks())
                elif parsed.path == "/userinfo":
                    self._json(200, provider._userinfo())
                elif parsed.path == "/authorize":
                    try:
                        location = provider._authorize(query)
                    except ValueError as exc:
                        self._json(400, {"error": str(exc)})
                        return
                    self.send_response(302)
                    self.send_header("Location", location)
                    self.end_headers()
                else:
                    self._json(404, {"error": "not found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if urlparse(self.path).path != "/token":
                    self._json(404, {"error": "not found"})
                    return
                try:
                    self._json(200, provider._token(form))
                except ValueError as exc:
                    self._json(400, {"error": "invalid_grant", "error_description": str(exc)})

        return Handler
