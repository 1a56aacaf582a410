"""Static files: content-hashed names, precompressed copies, cached for a year by browsers."""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


class StaticStorage(CompressedManifestStaticFilesStorage):
    """WhiteNoise's compressed manifest storage (``collectstatic`` writes ``app.<hash>.js`` and
    its ``.gz``; WhiteNoise serves them with ``Cache-Control: max-age=315360000, immutable``, so a
    repeat visit downloads no static file at all, and a changed file gets a new name).

    A file that was never collected keeps its plain name instead of failing the page: the test
    suite and ``runserver`` serve static files from the source folders without collecting them,
    and a file added after the last ``collectstatic`` is served the same way until the next one.
    In a deployment (``bin/up``, the Dockerfile) everything is collected, so every name is hashed.
    """

    manifest_strict = False

    def stored_name(self, name: str) -> str:
        try:
            return super().stored_name(name)
        except ValueError:  # not collected: no manifest entry and no file to hash
            return name
