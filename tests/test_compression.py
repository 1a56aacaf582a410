"""Lean responses: pages gzipped, static files hashed, precompressed and cached for a year."""

from __future__ import annotations

import gzip
import re

import pytest
from django.core.management import call_command
from django.http import StreamingHttpResponse
from django.test import Client, RequestFactory, override_settings

from mentalbench.middleware import CompressPagesMiddleware

pytestmark = pytest.mark.django_db


def test_pages_are_gzipped_for_browsers_that_accept_it(client, django_user_model):
    user = django_user_model.objects.create_user("gz", password="pw-123456789")
    client.force_login(user)
    plain = client.get("/")
    zipped = client.get("/", HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert plain.status_code == zipped.status_code == 200
    assert "Content-Encoding" not in plain
    assert zipped["Content-Encoding"] == "gzip" and "Accept-Encoding" in zipped["Vary"]
    body = gzip.decompress(zipped.content).decode()
    # The CSRF token is masked anew per response (BREACH), so only it may differ.
    mask = re.compile(r'(csrfmiddlewaretoken" value="|X-CSRFToken": ")[^"]+')
    assert mask.sub("", body) == mask.sub("", plain.content.decode())
    assert len(zipped.content) < len(plain.content)


def test_streamed_exports_are_not_compressed_on_the_fly():
    streamed = StreamingHttpResponse(iter(["a,b\n"] * 100), content_type="text/csv")
    middleware = CompressPagesMiddleware(lambda request: streamed)
    response = middleware(RequestFactory().get("/x.csv", HTTP_ACCEPT_ENCODING="gzip"))
    assert "Content-Encoding" not in response
    assert b"".join(response.streaming_content) == b"a,b\n" * 100


def test_collected_static_files_are_hashed_precompressed_and_cached_for_a_year(
    tmp_path, django_user_model
):
    with override_settings(STATIC_ROOT=tmp_path, DEBUG=False):
        call_command("collectstatic", "--noinput", "-v0")
        assert list(tmp_path.rglob("*.css.gz")), "no precompressed copies"
        client = Client()  # a new handler, so WhiteNoise indexes the collected folder
        user = django_user_model.objects.create_user("st", password="pw-123456789")
        client.force_login(user)
        page = client.get("/").content.decode()
        urls = re.findall(r'(?:src|href)="(/static/[^"]+)"', page)
        assert urls and all(re.search(r"\.[0-9a-f]{12}\.\w+$", u) for u in urls), urls
        response = client.get(urls[0], HTTP_ACCEPT_ENCODING="gzip")
        assert response.status_code == 200
        assert "immutable" in response["Cache-Control"]
        assert "max-age=315360000" in response["Cache-Control"]
        if urls[0].endswith((".css", ".js")):
            assert response["Content-Encoding"] == "gzip"
        response.close()


def test_uncollected_static_files_keep_their_plain_names(
    client, django_user_model, settings, tmp_path
):
    """Tests and runserver serve static files unhashed from the source folders."""
    settings.STATIC_ROOT = tmp_path  # nothing collected there
    user = django_user_model.objects.create_user("pl", password="pw-123456789")
    client.force_login(user)
    page = client.get("/").content.decode()
    urls = re.findall(r'(?:src|href)="(/static/[^"]+)"', page)
    assert urls and not any(re.search(r"\.[0-9a-f]{12}\.\w+$", u) for u in urls)
