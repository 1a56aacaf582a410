"""The client: one requests session with the researcher's API token."""

from __future__ import annotations

import hashlib
import os
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import requests

DEFAULT_TIMEOUT = 60.0
PAGE = 1000  # the API's largest page


class ApiError(RuntimeError):
    """The API refused a request: its status and its one-sentence `detail`."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class JobFailed(RuntimeError):
    """A job ended failed, cancelled or expired; the message is the job's own error."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.id} {job.state}: {job.error or job.message}")
        self.job = job


@dataclass(frozen=True)
class Study:
    id: int
    name: str
    kind: str
    n_conversations: int
    attributes: list[str]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> Study:
        return cls(
            id=int(body["id"]),
            name=str(body["name"]),
            kind=str(body.get("kind", "")),
            n_conversations=int(body.get("n_conversations") or 0),
            attributes=list(body.get("attributes") or []),
            raw=dict(body),
        )


@dataclass(frozen=True)
class Job:
    """A background job as the API last described it (`Client.job` reads it again)."""

    id: str
    kind: str
    state: str
    fraction: float
    message: str
    error: str
    result: dict[str, Any] | None
    download: str | None
    expires_at: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    ACTIVE = ("queued", "running")

    @property
    def active(self) -> bool:
        return self.state in self.ACTIVE

    @classmethod
    def from_api(cls, body: Mapping[str, Any]) -> Job:
        return cls(
            id=str(body["id"]),
            kind=str(body["kind"]),
            state=str(body["state"]),
            fraction=float(body["fraction"]),
            message=str(body.get("message") or ""),
            error=str(body.get("error") or ""),
            result=body.get("result"),
            download=body.get("download"),
            expires_at=body.get("expires_at"),
            raw=dict(body),
        )


def checksums_verify(directory: str | os.PathLike[str]) -> list[str]:
    """The files of a release whose SHA-256 differs from its SHA256SUMS (empty: all good)."""
    root = Path(directory)
    bad = []
    for line in (root / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, name = line.split(maxsplit=1)
        name = name.lstrip("*")
        hasher = hashlib.sha256()
        with (root / name).open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                hasher.update(chunk)
        if hasher.hexdigest() != digest:
            bad.append(name)
    return bad


class Client:
    """The MentalBench API as Python calls.

    Args:
        base_url: the site, e.g. ``https://mentalbench.example`` (``/api/`` is added).
        token: a researcher's API token (created on ``/accounts/tokens/``, docs/api-tokens.md);
            default: the ``MENTALBENCH_TOKEN`` environment variable.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
    ) -> None:
        base = base_url or os.environ.get("MENTALBENCH_URL", "")
        key = token or os.environ.get("MENTALBENCH_TOKEN", "")
        if not base or not key:
            raise ValueError("give base_url and token (or set MENTALBENCH_URL, MENTALBENCH_TOKEN)")
        self.api = base.rstrip("/") + "/api/"
        self.timeout = timeout
        self.session = session or requests.Session()
        self.session.headers["Authorization"] = f"Token {key}"
        self.session.headers["Accept"] = "application/json"

    # --- plumbing ---------------------------------------------------------------------------

    def _url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else self.api + path.lstrip("/")

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self.timeout)
        response = self.session.request(method, self._url(path), **kwargs)
        if response.status_code >= 400:
            try:
                body = response.json()
                detail = body.get("detail") if isinstance(body, dict) else None
                detail = detail if isinstance(detail, str) else str(body)
            except ValueError:
                detail = response.text[:500]
            response.close()
            raise ApiError(response.status_code, detail)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, path, **kwargs).json()

    def _pages(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[Any]:
        query = {**(params or {}), "limit": PAGE, "offset": 0}
        url: str | None = path
        while url is not None:
            body = self._json("GET", url, params=query)
            yield from body["results"]
            url, query = body.get("next"), {}

    # --- studies, ratings, reports ----------------------------------------------------------

    def studies(self) -> list[Study]:
        """Every study, by name."""
        return [Study.from_api(s) for s in self._pages("studies/")]

    def study(self, study_id: int) -> Study:
        return Study.from_api(self._json("GET", f"studies/{study_id}/"))

    def ratings(self, study_id: int, *, layout: str = "long") -> pd.DataFrame:
        """Every score of the study as a DataFrame, read from the streamed CSV export as it
        arrives (the JSON list is for pages; this is the way to take a whole study).
        ``layout="wide"``: a row per rater × conversation, a column per responder × attribute.
        """
        response = self._request(
            "GET", f"studies/{study_id}/export/", params={"layout": layout}, stream=True
        )
        with response:
            response.raw.decode_content = True  # gzip, if a proxy compressed it
            return pd.read_csv(response.raw, keep_default_na=False, na_values=[""])

    def ratings_page(self, **filters: Any) -> list[dict[str, Any]]:
        """Ratings as the JSON list gives them (every page), e.g. ``study=3, rater="C01"``."""
        return list(self._pages("ratings/", filters))

    def report(
        self,
        study_id: int,
        table: str = "reliability",
        *,
        timeout: float | None = None,
        progress: Callable[[Job], None] | None = None,
        **params: Any,
    ) -> pd.DataFrame:
        """A report table (reliability, answer, alt_test, …) as a DataFrame; parameters as the
        API takes them (``bootstrap=``, ``judge=[…]``, ``condition=``…). More bootstrap
        resamples than the default, not computed yet: the server answers 202 with the job that
        computes it; this waits for the job (``timeout``, ``progress`` as `wait` takes them) and
        asks again."""
        path = f"studies/{study_id}/reports/{table}/"
        for _ in range(3):
            response = self._request("GET", path, params=params)
            body = response.json()
            if response.status_code != 202:
                return pd.DataFrame(body["rows"])
            self.wait(body["job"]["id"], timeout=timeout, progress=progress)
        raise TimeoutError(f"the report of study {study_id} was still not ready after its job")

    def judge_assisted(self, study_id: int, judges: Sequence[str], **params: Any) -> dict[str, Any]:
        """Judge-assisted estimates (docs/judge-assisted.md) for these judges, as the API's
        JSON."""
        query = {"judge": list(judges), **params}
        result: dict[str, Any] = self._json(
            "GET", f"studies/{study_id}/judge-assisted/", params=query
        )
        return result

    # --- jobs ---------------------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        """Your jobs, newest first."""
        return [Job.from_api(j) for j in self._pages("jobs/")]

    def job(self, job: Job | str) -> Job:
        job_id = job.id if isinstance(job, Job) else job
        return Job.from_api(self._json("GET", f"jobs/{job_id}/"))

    def start_release(self, study_id: int, *, include_text: bool = True) -> Job:
        """Start the study's release bundle (or get the same request's job, already started)."""
        body = {"study": study_id, "include_text": include_text}
        return Job.from_api(self._json("POST", "jobs/release/", json=body))

    def start_kappa_f1(
        self,
        predictions: str | os.PathLike[str],
        *,
        n_sim: int = 1000,
        seed: int = 0,
        task: str = "",
        labels: Sequence[str] | None = None,
    ) -> Job:
        """Start a κ_F1 evaluation of a predictions CSV (columns ``true``, ``predicted``)."""
        path = Path(predictions)
        data: dict[str, Any] = {"n_sim": n_sim, "seed": seed, "task": task}
        if labels:
            data["labels"] = ",".join(labels)
        with path.open("rb") as handle:
            body = self._json(
                "POST", "jobs/kappa-f1/", data=data, files={"file": (path.name, handle, "text/csv")}
            )
        return Job.from_api(body)

    def cancel(self, job: Job | str) -> Job:
        job_id = job.id if isinstance(job, Job) else job
        return Job.from_api(self._json("POST", f"jobs/{job_id}/cancel/"))

    def wait(
        self,
        job: Job | str,
        *,
        poll: float = 1.0,
        timeout: float | None = None,
        progress: Callable[[Job], None] | None = None,
    ) -> Job:
        """Poll until the job ends; `progress` hears each state (e.g. to draw a bar). Returns the
        done job; raises JobFailed (failed, cancelled, expired) or TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        current = self.job(job)
        while current.active:
            if progress is not None:
                progress(current)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {current.id} still {current.state} after {timeout} s")
            time.sleep(poll)
            current = self.job(current)
        if progress is not None:
            progress(current)
        if current.state != "done":
            raise JobFailed(current)
        return current

    def download(self, job: Job | str, path: str | os.PathLike[str]) -> Path:
        """Save the job's result file at `path` (streamed to disk)."""
        current = job if isinstance(job, Job) and job.download else self.job(job)
        if not current.download:
            raise ApiError(404, f"job {current.id} has no file to download ({current.state})")
        target = Path(path)
        with self._request("GET", current.download, stream=True) as response:
            with target.open("wb") as handle:
                for chunk in response.iter_content(1 << 20):
                    handle.write(chunk)
        return target

    def release(
        self,
        study_id: int,
        directory: str | os.PathLike[str],
        *,
        include_text: bool = True,
        progress: Callable[[Job], None] | None = None,
        timeout: float | None = None,
    ) -> Path:
        """The study's release in `directory`: start the job (or join the same one), wait,
        download the zip, unpack it, and check every file against its SHA256SUMS (ValueError
        naming the files that differ)."""
        job = self.wait(
            self.start_release(study_id, include_text=include_text),
            progress=progress,
            timeout=timeout,
        )
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        archive = self.download(job, out / f"study-{study_id}-release.zip")
        with zipfile.ZipFile(archive) as zipped:
            zipped.extractall(out)
        archive.unlink()
        bad = checksums_verify(out)
        if bad:
            raise ValueError(f"files that differ from SHA256SUMS: {', '.join(bad)}")
        return out
