"""Numbers that know their limits: a judge's ICC from too little data is *not estimable*, with
its reason, on the dashboard, in reliability_report and in the API, and never gets a status, a
verdict or a colour."""

from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from django.core.management import call_command
from django.test import Client
from knox.models import AuthToken
from rest_framework.test import APIClient

from analysis import reports
from analysis.selectors import attribute_names, scores_frame
from annotation.models import Rater, Rating, Response, Score
from annotation.rater_codes import rater_codes_assign
from tests.factories import clinician_make, study_make

RESPONDERS = ["original", "gpt4o", "claude", "gemini", "llama_3", "qwen_2", "qwen_3", "ds_qwen",
              "ds_llama", "gpt4omini"]  # fmt: skip


def _rate(rater: Rater, response: Response, scores: list[int], source: str) -> None:
    rating = Rating.objects.create(
        rater=rater, response=response, status=Rating.Status.COMPLETE, source=source
    )
    # The clinician joined the study with their first work (an assignment or import does it).
    rater_codes_assign(study_id=response.conversation.study_id, rater_ids=[rater.pk])
    attributes = list(response.conversation.study.rubric.attributes.order_by("position"))
    Score.objects.bulk_create(
        Score(rating=rating, attribute=a, value=v) for a, v in zip(attributes, scores, strict=True)
    )


def _study(*, conversations: int, responders: list[str], clinician_scores, name: str):
    """One clinician and one judge over every response; ``clinician_scores(c, r)`` gives the
    clinician's seven scores of conversation c, responder index r."""
    study = study_make(name=name, conversations=conversations, responders=responders)
    clinician = clinician_make(username=f"clin-{name[:8].lower().replace(' ', '-')}")
    judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name=f"judge of {name}")
    rng = np.random.default_rng(1)
    for response in Response.objects.filter(conversation__study=study).select_related(
        "conversation", "responder"
    ):
        c = int(response.conversation.external_id[1:])
        r = responders.index(response.responder.key)
        _rate(clinician, response, clinician_scores(c, r), Rating.Source.FORM)
        _rate(judge, response, [int(v) for v in rng.integers(1, 6, 7)], Rating.Source.JUDGE)
    return study


@pytest.fixture
def one_conversation(db):
    """The issue's case: one clinician rated one conversation (the same 4 everywhere)."""
    return _study(
        conversations=1, responders=RESPONDERS, clinician_scores=lambda c, r: [4] * 7,
        name="One conversation",
    )  # fmt: skip


def _table(study) -> pd.DataFrame:
    df = scores_frame(study=study)
    return reports.reliability_table(df, attributes=attribute_names(study=study), n_boot=200)


def test_one_clinician_one_conversation_is_not_estimable_in_the_table(one_conversation):
    table = _table(one_conversation)
    assert len(table) == 7
    assert not table["estimable"].any()
    assert table["status"].isna().all() and table["verdict"].isna().all()
    assert table["icc_c1"].isna().all() and table["ci_width"].isna().all()
    assert (
        table["reason"].str.startswith("not estimable: the scores come from 1 conversation").all()
    )
    assert table["verdict_text"].str.startswith("Not estimable").all()
    # What is estimable still is: the means and the bias.
    assert (table["human_mean"] == 4.0).all() and table["bias"].notna().all()


def test_reliability_report_says_not_estimable_and_gives_no_status(one_conversation):
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "reliability_report", "--study", one_conversation.name, "--format", "csv",
        "--bootstrap", "200", stdout=out, stderr=err,
    )  # fmt: skip
    table = pd.read_csv(io.StringIO(out.getvalue()))
    assert table["status"].isna().all() and table["verdict"].isna().all()
    assert (~table["estimable"]).all()
    assert table["reason"].str.contains("1 conversation").all()
    text = io.StringIO()
    call_command(
        "reliability_report", "--study", one_conversation.name, "--bootstrap", "200", stdout=text
    )
    shown = text.getvalue()
    assert "GR" not in shown and "not estimable: the scores come from 1 conversation" in shown


def test_the_api_says_not_estimable_and_gives_no_status(one_conversation, researcher):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=researcher)[1]}")
    rows = client.get(f"/api/studies/{one_conversation.pk}/reports/reliability/").json()["rows"]
    assert len(rows) == 7
    for row in rows:
        assert row["estimable"] is False and row["status"] is None and row["verdict"] is None
        assert row["icc_c1"] is None and row["ci_width"] is None
        assert row["reason"].startswith("not estimable:")


def test_the_dashboard_says_not_estimable_with_its_reason(one_conversation, researcher):
    client = Client()
    client.force_login(researcher)
    html = client.get(f"/analysis/studies/{one_conversation.pk}/").content.decode()
    verdicts = html.split('id="verdicts"')[1].split("</details>")[0].split("<tbody>")[1]
    assert verdicts.count("not estimable") >= 7
    assert "the scores come from 1 conversation" in verdicts
    for status in (">GR<", ">MR<", ">PR<", "unreliable", "suitable"):
        assert status not in verdicts
    # No empty ICC chart either (a heatmap and a forest plot of nothing): the page says why;
    # the bias, which a pair is enough for, is still drawn.
    assert 'id="spec-icc_heatmap"' not in html and 'id="spec-forest"' not in html
    assert 'id="icc-nothing"' in html and 'id="spec-bias"' in html


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("conversations", "responders", "scores", "reason"),
    [
        # Two conversations, ten responders, a clinician who gives everything a 4.
        (2, RESPONDERS, lambda c, r: [4] * 7, "the clinicians give every responder the same mean"),
        # Three responders only.
        (3, RESPONDERS[:3], lambda c, r: [1 + (r + c) % 5] * 7, "only 3 responders"),
    ],
)
def test_each_reason_is_said_in_plain_words(conversations, responders, scores, reason):
    study = _study(
        conversations=conversations, responders=responders, clinician_scores=scores,
        name=f"case {reason[:10]}",
    )  # fmt: skip
    table = _table(study)
    assert not table["estimable"].any() and table["status"].isna().all()
    assert table["reason"].str.contains(reason).all()


@pytest.mark.django_db
def test_enough_varied_data_is_estimable():
    rng = np.random.default_rng(3)
    quality = rng.normal(3, 1, len(RESPONDERS))
    study = _study(
        conversations=6, responders=RESPONDERS, name="Enough data",
        clinician_scores=lambda c, r: [int(np.clip(round(quality[r] + rng.normal(0, 0.5)), 1, 5))
                                       for _ in range(7)],
    )  # fmt: skip
    table = _table(study)
    assert table["estimable"].all() and table["status"].notna().all()
    assert not math.isnan(float(table["icc_c1"].iloc[0]))
