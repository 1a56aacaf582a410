"""Response headers that every dynamic page needs."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.middleware.gzip import GZipMiddleware
from django.utils.cache import add_never_cache_headers


class NoStoreMiddleware:
    """Keep every dynamic response out of browser and proxy caches (`Cache-Control: no-store`).

    Every page here is private to someone: a clinician's blinded rating page, a researcher's
    export, an admin's audit trail. A shared computer's cache or a proxy must not keep a copy.
    Static files never reach this middleware (WhiteNoise answers them first, with long-lived
    cache headers); a view that sets its own Cache-Control keeps it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not response.has_header("Cache-Control"):
            add_never_cache_headers(response)
        return response


class CompressPagesMiddleware(GZipMiddleware):
    """Gzip pages and JSON (a rating page is about a twentieth of its size compressed), but not
    streamed exports: compressing a 50 MB CSV on the fly costs more CPU than the export itself
    on a small server, and a researcher's download is not what makes the platform feel slow.

    Compression and secrets (BREACH): see docs/security.md — Django masks the CSRF token anew in
    every response, and no page reflects a request's input next to another long-lived secret.
    """

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        if response.streaming:
            return response
        return super().process_response(request, response)
