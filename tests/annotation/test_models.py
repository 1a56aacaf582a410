import pytest
from django.db import IntegrityError, connection, transaction

from annotation.models import Conversation, Rater, Rating, Responder, Response, Score, Study
from annotation.services import rubric_get_or_create_default


@pytest.fixture
def response(db):
    study = Study.objects.create(name="S", rubric=rubric_get_or_create_default())
    conversation = Conversation.objects.create(study=study, external_id="1", context="ctx")
    responder = Responder.objects.create(key="m", name="M", family="f")
    return Response.objects.create(conversation=conversation, responder=responder, text="t")


def test_a_second_rating_for_the_same_rater_response_and_run_is_refused(response):
    rater = Rater.objects.create(kind=Rater.Kind.JUDGE, name="j")
    Rating.objects.create(rater=rater, response=response, status="complete", source="import")
    with pytest.raises(IntegrityError), transaction.atomic():
        # run is NULL for both: NULLS NOT DISTINCT makes them collide.
        Rating.objects.create(rater=rater, response=response, status="complete", source="import")
    Rating.objects.create(
        rater=rater, response=response, repeat=1, status="complete", source="import"
    )
    assert Rating.objects.filter(rater=rater).count() == 2


@pytest.mark.parametrize("value", [0, 6, -1])
def test_a_score_outside_the_rubric_scale_is_refused_by_the_database(response, value):
    assert connection.vendor == "postgresql"
    rater = Rater.objects.create(kind=Rater.Kind.JUDGE, name="j")
    rating = Rating.objects.create(
        rater=rater, response=response, status="complete", source="import"
    )
    attribute = response.conversation.study.rubric.attributes.get(name="Safety")
    Score.objects.create(rating=rating, attribute=attribute, value=5)
    other = response.conversation.study.rubric.attributes.get(name="Empathy")
    with pytest.raises(IntegrityError, match="score_value_is_a_level"), transaction.atomic():
        Score.objects.create(rating=rating, attribute=other, value=value)


def test_a_judge_rater_cannot_have_a_user_account(response, django_user_model):
    user = django_user_model.objects.create(username="u")
    with pytest.raises(IntegrityError), transaction.atomic():
        Rater.objects.create(kind=Rater.Kind.JUDGE, name="j", user=user)


def test_default_rubric_has_seven_attributes_with_five_anchors(db):
    rubric = rubric_get_or_create_default()
    attributes = list(rubric.attributes.prefetch_related("levels"))
    assert [a.name for a in attributes] == [
        "Guidance",
        "Informativeness",
        "Relevance",
        "Safety",
        "Empathy",
        "Helpfulness",
        "Understanding",
    ]
    assert [a.group for a in attributes] == ["CSS"] * 4 + ["ARS"] * 3
    assert all(
        sorted(level.value for level in a.levels.all()) == [1, 2, 3, 4, 5] for a in attributes
    )
    assert rubric_get_or_create_default() == rubric
