"""A person's browser without the browser: a real HTTP session against pytest-django's
`live_server`, for the tests of who gets into an account and how.

The session keeps its cookies (session, CSRF) as a browser does, answers every form with the
CSRF token Django set, and follows no redirect by itself, so a test sees each step (the code
prompt, the re-authentication page, the sign-out). Nothing is faked: the request goes through
the whole middleware stack of a running server, as the platform's visitors' requests do.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import requests


class LiveSession:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.http = requests.Session()

    def url(self, path: str) -> str:
        return path if path.startswith("http") else self.base_url + path

    def get(self, path: str, **kwargs) -> requests.Response:
        kwargs.setdefault("allow_redirects", False)
        return self.http.get(self.url(path), timeout=30, **kwargs)

    def post(self, path: str, data: dict | None = None, **kwargs) -> requests.Response:
        """POST a form as a browser would: with the CSRF cookie's token in the form."""
        if "csrftoken" not in self.http.cookies:
            self.get("/accounts/login/")  # any page with a form sets the CSRF cookie
        kwargs.setdefault("allow_redirects", False)
        form = {"csrfmiddlewaretoken": self.http.cookies["csrftoken"], **(data or {})}
        return self.http.post(self.url(path), data=form, timeout=30, **kwargs)

    def sign_in(self, username: str, password: str, *, code: str | None = None) -> str:
        """The sign-in form, then the code prompt when the account asks for one (with `code`);
        the path the last answer sends the browser to ("" when it sends it nowhere: a refused
        code)."""
        response = self.post("/accounts/login/", {"login": username, "password": password})
        assert response.status_code == 302, response.text[:500]
        location = path_of(response)
        if location.startswith("/accounts/2fa/authenticate/") and code is not None:
            response = self.post(location, {"code": code})
            # A refused code answers the prompt again (200): no redirect, so "".
            location = path_of(response)
        return location

    def signed_in(self) -> bool:
        """Whether the server still takes this session as signed in (the home page sends the
        signed-out to the sign-in page)."""
        response = self.get("/")
        return not path_of(response).startswith("/accounts/login/")


def path_of(response: requests.Response) -> str:
    """Where a redirect sends the browser, as a path with its query ('' for no redirect)."""
    location = response.headers.get("Location", "")
    parts = urlsplit(location)
    return parts.path + (f"?{parts.query}" if parts.query else "")
