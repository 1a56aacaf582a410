"""The API keeps the contract its OpenAPI schema states: bounded pages, typed and bounded query
parameters (unknown, repeated or out-of-bounds ones refused with 400), every status documented
with its body — checked by hand here, and by schemathesis against a live server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from knox.models import AuthToken
from rest_framework.test import APIClient

from analysis.api_params import DEFAULT_LIMIT, MAX_LIMIT, MAX_OFFSET
from annotation.models import Conversation, LabelAnnotation, Rater, Rating, Response, Score, Study
from annotation.rater_codes import rater_codes_assign
from annotation.responders import KNOWN_RESPONDERS
from annotation.services import (
    clinician_rater_get_or_create,
    judge_rater_get_or_create,
    responders_ensure,
    study_get_or_create,
)

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
CONFIG = Path(__file__).resolve().parents[2] / "schemathesis.toml"
# A fixed seed in CI; run by hand with another (docs/api-tokens.md, "The contract").
SEED = int(os.environ.get("MENTALBENCH_SCHEMATHESIS_SEED", "29"))


def _token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=user)[1]}")
    return client


@pytest.fixture
def api(researcher) -> APIClient:
    return _token_client(researcher)


def mentalalign_like(*, conversations: int = 12) -> Study:
    """A small study shaped like MentalAlign-70k: ten responders (the human reference and nine
    models), two clinicians rating every conversation, the two released judges with the paper's
    self-exclusions; conditions and sources to filter by; a clinician's draft. Beside it, a
    distortion-labelling study with a judge's and a clinician's labels."""
    rng = np.random.default_rng(29)
    study, _ = study_get_or_create(name="MentalAlign-like")
    attributes = list(study.rubric.attributes.order_by("position"))
    responders = responders_ensure(keys=set(KNOWN_RESPONDERS))
    raters = [
        clinician_rater_get_or_create(name="clinician A"),
        clinician_rater_get_or_create(name="clinician B"),
        judge_rater_get_or_create(name="claude-3.7-sonnet"),
        judge_rater_get_or_create(name="gpt-4o"),
    ]
    for c in range(conversations):
        conversation = Conversation.objects.create(
            study=study,
            external_id=str(c + 1),
            context=f"Conversation {c + 1}: I cannot sleep before exams.",
            conditions=["anxiety"] if c % 2 else ["depression", "sleep"],
            source="MentalChat16K" if c % 3 else "MentalHealthCounseling",
        )
        responses = Response.objects.bulk_create(
            Response(conversation=conversation, responder=r, text=f"{key} answers {c}.")
            for key, r in responders.items()
        )
        for rater in raters:
            ratings = Rating.objects.bulk_create(
                Rating(
                    rater=rater,
                    response=response,
                    status="complete",
                    source="import",
                    rationale="" if rater.kind == Rater.Kind.JUDGE else "plain",
                )
                for response in responses
            )
            Score.objects.bulk_create(
                Score(rating=rating, attribute=a, value=int(v))
                for rating in ratings
                for a, v in zip(attributes, rng.integers(1, 6, len(attributes)), strict=True)
            )
    Rating.objects.create(
        rater=raters[0], response=responses[0], status="draft", source="form", repeat=1
    )
    # The import that stores clinicians' ratings gives them their study codes (judges get none).
    rater_codes_assign(study_id=study.pk, rater_ids=[r.pk for r in raters])
    labelled, _ = study_get_or_create(
        name="Distortions", kind=Study.Kind.DISTORTION_LABELLING, label_scheme="ranked"
    )
    for m in range(3):
        message = Conversation.objects.create(
            study=labelled, external_id=f"m{m}", context="I always fail."
        )
        for rater, source in ((raters[2], "judge"), (raters[1], "form")):
            LabelAnnotation.objects.create(
                rater=rater,
                conversation=message,
                status="complete",
                source=source,
                labels=["Overgeneralization"],
            )
    rater_codes_assign(study_id=labelled.pk, rater_ids=[raters[1].pk])
    return study


@pytest.mark.parametrize(
    ("params", "errors"),
    [
        ({"limit": MAX_LIMIT + 1}, {"limit": [f"must be at most {MAX_LIMIT}"]}),
        ({"limit": 0}, {"limit": ["must be at least 1"]}),
        ({"limit": -5}, {"limit": ["must be at least 1"]}),
        ({"limit": "ten"}, {"limit": ["must be a whole number, got 'ten'"]}),
        ({"limit": ""}, {"limit": ["must be a whole number, got ''"]}),
        ({"limit": "1.5"}, {"limit": ["must be a whole number, got '1.5'"]}),
        ({"limit": "68719476735"}, {"limit": [f"must be at most {MAX_LIMIT}"]}),
        (
            {"limit": "612685230202111196932979294208", "offset": "-14329"},
            {"limit": [f"must be at most {MAX_LIMIT}"], "offset": ["must be at least 0"]},
        ),
        ({"offset": MAX_OFFSET + 1}, {"offset": [f"must be at most {MAX_OFFSET}"]}),
        ({"offset": ["1", "2"]}, {"offset": ["give it once (given 2 times)"]}),
    ],
)
def test_pages_refuse_bad_limits_and_offsets_with_400(api, params, errors):
    for url in ("/api/studies/", "/api/ratings/", "/api/label-annotations/"):
        response = api.get(url, params)
        assert (response.status_code, response.json()) == (400, errors), url


def test_pages_hold_at_most_max_limit_and_default_to_default_limit(api, small_study):
    pk = small_study.study.pk
    everything = api.get("/api/ratings/", {"study": pk, "limit": MAX_LIMIT}).json()
    assert len(everything["results"]) == everything["count"] <= MAX_LIMIT
    default = api.get("/api/ratings/", {"study": pk}).json()
    assert len(default["results"]) == min(DEFAULT_LIMIT, default["count"])
    last = api.get("/api/ratings/", {"study": pk, "offset": MAX_OFFSET}).json()
    assert last["results"] == [] and last["count"] == everything["count"]


def test_pages_walk_the_list_in_order_from_either_end(
    api, small_study, django_assert_max_num_queries
):
    """Pages past the middle are read from the end of the list (api_params.page_ids): walking
    every page gives exactly the list, each rating once, in id order."""
    params = {"study": small_study.study.pk}
    whole = api.get("/api/ratings/", {**params, "limit": MAX_LIMIT}).json()
    ids = [r["id"] for r in whole["results"]]
    assert ids == sorted(ids) and len(ids) == whole["count"] > 40
    walked = []
    for offset in range(0, len(ids), 7):
        with django_assert_max_num_queries(9):
            page = api.get("/api/ratings/", {**params, "limit": 7, "offset": offset}).json()
        assert page["count"] == len(ids)
        walked += page["results"]
    assert walked == whole["results"]
    # The last rows, a page that runs past the end, and the list's last rating on its own.
    tail = api.get("/api/ratings/", {**params, "limit": 10, "offset": len(ids) - 3}).json()
    assert [r["id"] for r in tail["results"]] == ids[-3:] and tail["next"] is None
    (one,) = api.get("/api/ratings/", {**params, "limit": 1, "offset": len(ids) - 1}).json()[
        "results"
    ]
    assert one == whole["results"][-1] == api.get(f"/api/ratings/{one['id']}/").json()


@pytest.mark.parametrize(
    ("url", "params", "errors"),
    [
        (
            "/api/studies/{pk}/export/",
            {"layout": "AAA"},
            {"layout": ["must be one of long, wide, got 'AAA'"]},
        ),
        (
            "/api/ratings/",
            {"identified": "garbage"},
            {"identified": ["must be true or false (1 or 0), got 'garbage'"]},
        ),
        (
            "/api/ratings/",
            {"identified": ""},
            {"identified": ["must be true or false (1 or 0), got ''"]},
        ),
        (
            "/api/ratings/",
            {"studyy": "1"},
            {
                "studyy": [
                    "unknown parameter; this endpoint takes: study, rater, status, identified, "
                    "limit, offset"
                ]
            },
        ),
        *(
            ("/api/ratings/", {"rater": name}, {"rater": ["must not contain control characters"]})
            for name in ("a\x00b", "gpt-4o\n", "\x1b[31m")
        ),
        ("/api/ratings/", {"study": "0"}, {"study": ["must be at least 1"]}),
        (
            "/api/studies/{pk}/reports/reliability/",
            {"bootstrap": "0"},
            {"bootstrap": ["must be at least 1"]},
        ),
        (
            "/api/studies/{pk}/reports/reliability/",
            {"bootstrap": "20001", "seed": "-1"},
            {"bootstrap": ["must be at most 20000"], "seed": ["must be at least 0"]},
        ),
        (
            "/api/studies/{pk}/reports/reliability/",
            {"judge": ""},
            {"judge": ["0: must not be empty"]},
        ),
        (
            "/api/studies/{pk}/",
            {"limit": "1"},
            {"limit": ["unknown parameter; this endpoint takes: none"]},
        ),
    ],
)
def test_bad_query_parameters_are_400_naming_each(api, small_study, url, params, errors):
    response = api.get(url.format(pk=small_study.study.pk), params)
    assert (response.status_code, response.json()) == (400, errors)


def test_bad_parameters_wait_for_authentication_and_permission(small_study, clinician_user):
    assert APIClient().get("/api/ratings/", {"limit": "x"}).status_code == 401
    assert _token_client(clinician_user).get("/api/ratings/", {"limit": "x"}).status_code == 403


def test_what_the_schema_promises_is_what_the_server_holds(db):
    """The bounds in the schema come from the serializers the server validates with."""
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    operations = {
        (path, method): operation
        for path, item in schema["paths"].items()
        for method, operation in item.items()
    }
    assert "/api/schema/" not in schema["paths"]
    jobs = {key: op for key, op in operations.items() if key[0].startswith("/api/jobs/")}
    assert set(jobs) == {
        ("/api/jobs/", "get"),
        ("/api/jobs/{id}/", "get"),
        ("/api/jobs/{id}/cancel/", "post"),
        ("/api/jobs/{id}/download/", "get"),
        ("/api/jobs/release/", "post"),
        ("/api/jobs/kappa-f1/", "post"),
    }
    for start in ("/api/jobs/release/", "/api/jobs/kappa-f1/"):
        assert {"200", "201", "400", "404", "429"} <= set(jobs[start, "post"]["responses"])
    operations = {key: op for key, op in operations.items() if key not in jobs}
    assert len(operations) == 10 and {m for _, m in operations} == {"get"}
    for (path, _), operation in operations.items():
        statuses = set(operation["responses"])
        expected = {"200", "400", "401", "403", "414", "429"} | ({"404"} if "{" in path else set())
        if path == "/api/studies/{id}/reports/{table}/":
            expected.add("202")  # more resamples than the default: the job computing them
        assert statuses == expected, path
        assert operation["responses"]["400"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ParameterErrors"
        }
        for code in ("401", "403", "429"):
            body = operation["responses"][code]["content"]["application/json"]["schema"]
            assert body == {"$ref": "#/components/schemas/Error"}, (path, code)
        assert "Retry-After" in operation["responses"]["429"]["headers"]
        names = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
        assert "format" not in names, path
    ratings = {p["name"]: p["schema"] for p in operations["/api/ratings/", "get"]["parameters"]}
    assert ratings["limit"] == {
        "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT
    }  # fmt: skip
    assert ratings["offset"] == {
        "type": "integer",
        "minimum": 0,
        "maximum": MAX_OFFSET,
        "default": 0,
    }
    assert ratings["status"]["enum"] == ["draft", "complete", "invalid"]
    assert ratings["rater"]["maxLength"] == 200 and ratings["rater"]["minLength"] == 1
    export = {
        p["name"]: p["schema"] for p in operations["/api/studies/{id}/export/", "get"]["parameters"]
    }
    assert export["layout"]["enum"] == ["long", "wide"]
    report = {
        p["name"]: p["schema"]
        for p in operations["/api/studies/{id}/reports/{table}/", "get"]["parameters"]
    }
    assert (report["bootstrap"]["minimum"], report["bootstrap"]["maximum"]) == (1, 20_000)
    pending = operations["/api/studies/{id}/reports/{table}/", "get"]["responses"]["202"]
    pending_ref = pending["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    pending_body = schema["components"]["schemas"][pending_ref]["properties"]
    assert set(pending_body) == {"detail", "job"}
    assert pending_body["job"]["$ref"].endswith("/Job")
    assert report["judge"]["type"] == "array" and report["judge"]["maxItems"] == 20
    assisted = {
        p["name"]: p for p in operations["/api/studies/{id}/judge-assisted/", "get"]["parameters"]
    }
    assert assisted["judge"]["required"] is True
    assert (assisted["alpha"]["schema"]["minimum"], assisted["alpha"]["schema"]["maximum"]) == (
        0.001,
        0.5,
    )
    assert schema["components"]["schemas"]["ParameterErrors"]["additionalProperties"] == {
        "type": "array",
        "items": {"type": "string"},
    }


def test_a_url_no_endpoint_matches_answers_the_json_error_body(api, small_study):
    for url in (
        "/api/nothing/",
        f"/api/studies/{small_study.study.pk}/reports/NOPE/",
        "/api/studies/abc/judge-assisted/",
    ):
        response = api.get(url)
        assert response.status_code == 404 and response["Content-Type"] == "application/json"
        assert response.json() == {"detail": f"no API endpoint at {url}"}
    # The rest of the site keeps Django's page.
    assert "text/html" in APIClient().get("/no-such-page/")["Content-Type"]


def test_the_export_answers_a_client_that_accepts_only_csv(api, small_study):
    url = f"/api/studies/{small_study.study.pk}/export/"
    response = api.get(url, HTTP_ACCEPT="text/csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert b"".join(response.streaming_content).startswith(b"study,")
    refused = api.get(url, {"layout": "tall"}, HTTP_ACCEPT="text/csv")
    assert refused.status_code == 400 and refused["Content-Type"] == "application/json"


def test_a_method_the_api_does_not_have_is_405(api, small_study):
    for url in ("/api/ratings/", f"/api/studies/{small_study.study.pk}/"):
        assert api.generic("TRACE", url + "?identified=true").status_code == 405
        assert api.post(url).status_code == 405


def _schemathesis(url: str, token: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(SCHEMATHESIS), "--config-file", str(CONFIG), "run", f"{url}/api/schema/",
            "--header", f"Authorization: Token {token}",
            "--seed", str(SEED),
            "--workers", "1",
            "--request-timeout", "10",
            "--suppress-health-check", "too_slow",
            *args,
        ],
        capture_output=True, text=True, cwd=cwd, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_schemathesis_finds_no_failure_against_a_mentalalign_like_study(
    live_server, researcher, tmp_path, monkeypatch
):
    """Every check schemathesis has, on every operation, from the schema alone: 0 failures and
    0 errors. `ignored_auth` (requests with no or a wrong token must get 401) runs apart, with
    the failed-token brake loosened: the wrong tokens it sends would otherwise earn a 429."""
    from accounts.authentication import TokenFailureThrottle

    mentalalign_like()
    token = AuthToken.objects.create(user=researcher)[1]
    run = _schemathesis(
        live_server.url, token,
        "--checks", "all", "--exclude-checks", "ignored_auth", "--max-examples", "8",
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "passed" in run.stdout and "failure" not in run.stdout and "error" not in run.stdout

    monkeypatch.setattr(TokenFailureThrottle, "rate", "100000/min", raising=False)
    auth = _schemathesis(
        live_server.url, token,
        "--checks", "ignored_auth", "--phases", "examples,fuzzing", "--max-examples", "3",
        cwd=tmp_path,
    )  # fmt: skip
    assert auth.returncode == 0, auth.stdout[-6000:] + auth.stderr[-2000:]
