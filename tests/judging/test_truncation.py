"""An answer cut off by the token limit is never a rating, whatever could be parsed from it.

Over real HTTP to the fake OpenAI and Anthropic servers, through the official SDKs: the fake cuts
an answer longer than the request's max_tokens and says so (finish_reason "length", stop_reason
"max_tokens"), in prompt-only and structured modes and in batch results.
"""

from __future__ import annotations

import pytest

from annotation.models import LabelAnnotation, Rating
from judging import services
from judging.models import Run, RunItem
from scoring.parsing import parse_judge_output
from tests.factories import distortion_study_make, texts_study_make

from .runs import ATTRIBUTES, batch_endpoint, judge, launch, marker, poll_until_settled, script

pytestmark = pytest.mark.django_db(transaction=True)

# 50 tokens are 200 characters to the fake: past every score of its judge answer, inside its
# explanation (the answer is about 250 characters), so every score has come when it is cut.
CUTTING_LIMIT = 50

MODES = [
    ("openai", "off"),
    ("openai", "json_schema"),
    ("anthropic", "off"),
    ("anthropic", "anthropic_tool"),
]


def _sent_limits(fake_llm, mark: str) -> list[int]:
    return [
        r.body.get("max_completion_tokens") or r.body.get("max_tokens")
        for r in fake_llm.requests_for(mark)
    ]


@pytest.mark.parametrize(("provider", "structured"), MODES)
def test_an_answer_cut_by_max_tokens_is_invalid_in_every_mode(
    endpoint_factory, fake_llm, provider, structured
):
    mark = marker("ok")
    study, ids = texts_study_make(texts={"cut": mark})
    endpoint = endpoint_factory(provider, structured_output=structured)
    run = judge(study, endpoint, max_tokens=CUTTING_LIMIT, max_output_attempts=1)
    rating = Rating.objects.get(run=run, response_id=ids["cut"])
    assert rating.status == Rating.Status.INVALID and not rating.scores.exists()
    stop = "max_tokens" if provider == "anthropic" else "length"
    assert (
        f"cut off by the token limit ({CUTTING_LIMIT} tokens, finish reason {stop})" in rating.error
    )
    assert rating.raw_output  # the raw answer is kept
    if structured == "anthropic_tool":
        # The cut tool input came with every score: a parser alone would have taken it.
        assert parse_judge_output(rating.raw_output, ATTRIBUTES).ok
    item = RunItem.objects.get(run=run, response_id=ids["cut"])
    assert item.status == RunItem.Status.FAILED and "cut off by the token limit" in item.last_error
    assert _sent_limits(fake_llm, mark) == [CUTTING_LIMIT]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_complete_answer_the_provider_says_it_cut_is_still_invalid(
    endpoint_factory, fake_llm, provider
):
    study, ids = texts_study_make(texts={"cut": marker("cut_after_answer")})
    run = judge(study, endpoint_factory(provider), max_output_attempts=1)
    rating = Rating.objects.get(run=run, response_id=ids["cut"])
    assert parse_judge_output(rating.raw_output, ATTRIBUTES).ok  # the JSON itself parses
    assert rating.status == Rating.Status.INVALID and not rating.scores.exists()
    assert rating.error.startswith("no valid judge output; attempt 1: cut off by the token limit")


def test_json_that_never_closes_is_cut_off_even_when_the_server_does_not_say_so(
    endpoint_factory, fake_llm
):
    study, ids = texts_study_make(texts={"cut": marker("cut_unreported")})
    run = judge(study, endpoint_factory("openai"), max_output_attempts=1)
    rating = Rating.objects.get(run=run, response_id=ids["cut"])
    assert rating.status == Rating.Status.INVALID and not rating.scores.exists()
    assert "cut off by the token limit: the JSON answer never closes" in rating.error


@pytest.mark.parametrize(("provider", "structured"), MODES)
def test_the_re_ask_after_a_cut_doubles_max_tokens(
    endpoint_factory, fake_llm, provider, structured
):
    mark = marker("ok")
    study, ids = texts_study_make(texts={"cut": mark})
    endpoint = endpoint_factory(provider, structured_output=structured)
    run = judge(study, endpoint, max_tokens=CUTTING_LIMIT, max_output_attempts=3)
    assert run.status == Run.Status.DONE
    rating = Rating.objects.get(run=run, response_id=ids["cut"])
    assert rating.status == Rating.Status.COMPLETE and rating.scores.count() == len(ATTRIBUTES)
    assert _sent_limits(fake_llm, mark) == [CUTTING_LIMIT, 2 * CUTTING_LIMIT]


def test_json_that_never_closes_is_re_asked_with_a_doubled_limit_though_the_server_said_stop(
    endpoint_factory, fake_llm
):
    """Cut off whatever the provider's finish reason says: the answer needs more room, so its
    re-ask doubles the limit (it kept 1024, 1024, 1024 when only the provider's flag counted)."""
    mark = marker("cut_unreported")
    study, _ = texts_study_make(texts={"cut": mark})
    run = judge(study, endpoint_factory("openai"), max_tokens=64, max_output_attempts=3)
    assert _sent_limits(fake_llm, mark) == [64, 128, 256]
    item = RunItem.objects.get(run=run)
    assert item.last_error.count("the JSON answer never closes") == 3


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_re_ask_after_json_that_never_closes_doubles_the_limit(
    endpoint_factory, fake_llm, provider
):
    mark = marker("cut_unreported")
    study, _ = texts_study_make(texts={"cut": mark})
    endpoint = batch_endpoint(endpoint_factory, provider)
    poll_until_settled(launch(study, endpoint, max_tokens=64, max_output_attempts=3))
    assert _sent_limits(fake_llm, mark) == [64, 128, 256]


def test_the_raised_limit_stops_at_four_times_the_runs_own(endpoint_factory, fake_llm):
    mark = marker("ok")
    study, _ = texts_study_make(texts={"cut": mark})
    judge(study, endpoint_factory("openai"), max_tokens=10, max_output_attempts=5)
    assert _sent_limits(fake_llm, mark) == [10, 20, 40, 40, 40]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_result_cut_by_the_token_limit_is_invalid_and_re_asked(
    endpoint_factory, fake_llm, provider
):
    study, ids = texts_study_make(texts={"cut": marker("cut_after_answer"), "ok": "fine"})
    run = poll_until_settled(
        launch(study, batch_endpoint(endpoint_factory, provider), max_output_attempts=2)
    )
    items = {i.response_id: i for i in RunItem.objects.filter(run=run)}
    cut = items[ids["cut"]]
    assert cut.status == RunItem.Status.FAILED and cut.attempts == 2
    assert cut.last_error.count("cut off by the token limit") == 2
    assert not Rating.objects.filter(run=run, response_id=ids["cut"], status="complete").exists()
    assert items[ids["ok"]].status == RunItem.Status.DONE


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_re_ask_after_a_cut_doubles_max_tokens_as_immediate_mode_does(
    endpoint_factory, fake_llm, provider
):
    mark, other = marker("ok"), marker("ok", n=2)
    study, ids = texts_study_make(texts={"cut": mark, "fits": other})
    endpoint = batch_endpoint(endpoint_factory, provider)
    run = poll_until_settled(launch(study, endpoint, max_tokens=10, max_output_attempts=4))
    # Cut at 10, 20 and 40 (four times the run's own limit is the most), then still cut.
    assert _sent_limits(fake_llm, mark) == [10, 20, 40, 40]
    cut = RunItem.objects.get(run=run, response_id=ids["cut"])
    assert cut.status == RunItem.Status.FAILED
    assert "cut off by the token limit (40 tokens" in cut.last_error
    # A limit that is cut once and then fits: the doubled re-ask's answer is stored.
    sent_before = len(_sent_limits(fake_llm, other))
    run = poll_until_settled(
        launch(study, endpoint, max_tokens=CUTTING_LIMIT, max_output_attempts=3)
    )
    assert _sent_limits(fake_llm, other)[sent_before:] == [CUTTING_LIMIT, 2 * CUTTING_LIMIT]
    fits = Rating.objects.get(run=run, response_id=ids["fits"])
    assert fits.status == Rating.Status.COMPLETE and fits.scores.count() == len(ATTRIBUTES)


def test_a_label_answer_cut_by_the_token_limit_is_invalid_though_its_part_parses(
    endpoint_factory, fake_llm
):
    # Two tokens are eight characters to the fake: "Labeling, Mind Reading" arrives as
    # "Labeling", one valid label on its own, with finish_reason "length".
    study = distortion_study_make(messages=[f"I am useless. {script('Labeling, Mind Reading')}"])
    run = services.labelling_run_create(
        study_id=study.id,
        endpoint=endpoint_factory(),
        repeats=1,
        max_tokens=2,
        max_output_attempts=1,
    )
    services.run_work(run_id=run.id)
    (annotation,) = LabelAnnotation.objects.filter(run=run)
    assert annotation.raw_output == "Labeling"
    assert annotation.status == LabelAnnotation.Status.INVALID and annotation.labels == []
    assert "cut off by the token limit (2 tokens, finish reason length)" in annotation.error
