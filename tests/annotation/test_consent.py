"""Consent and credentials: a study's versioned consent text is accepted before the first save
(and again for a new version, also by a tab opened before it); withdrawal stops new work and
keeps or removes the ratings as the text says, tested both ways; credentials and consent reach
the release's datasheet as counts that name no one."""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotation.models import Assignment, ConsentRecord, ConsentText, Rating
from annotation.selectors import clinicians_summary
from annotation.services.consent import ConsentError, consent_accept, consent_text_publish

TEXT = "I agree that my ratings are used for research and published without my name."


def _save(client, assignment, score=3):
    item = assignment.items.first()
    attribute = assignment.conversation.study.rubric.attributes.first()
    return client.post(
        reverse("annotation:save", args=[assignment.token]),
        {"item": item.token, "attribute": attribute.pk, "score": score},
    )


@pytest.fixture
def consent_study(study):
    consent_text_publish(study=study, text=TEXT, on_withdrawal=ConsentText.OnWithdrawal.KEEP)
    return study


def test_no_rating_before_consent_then_ratings_after_it(alice, consent_study, assignment):
    rate = reverse("annotation:rate", args=[assignment.token])
    consent_url = reverse("annotation:consent", args=[consent_study.pk])
    assert alice.get(rate)["Location"] == consent_url
    queue = alice.get(reverse("annotation:queue")).content.decode()
    assert f'id="consent-note-{consent_study.pk}"' in queue and consent_url in queue
    refused = _save(alice, assignment)
    assert refused.status_code == 409 and "consent" in refused.content.decode()
    assert not Rating.objects.filter(rater=assignment.rater).exists()

    page = alice.get(consent_url).content.decode()
    assert TEXT in page and "version 1" in page
    alice.post(consent_url, {"action": "accept"})
    assert alice.get(rate).status_code == 200
    assert _save(alice, assignment).status_code == 200
    record = ConsentRecord.objects.get(rater=assignment.rater)
    assert record.consent_text.version == 1 and record.withdrawn_at is None


def test_a_new_version_is_accepted_again_even_by_a_tab_opened_before(
    alice, consent_study, assignment
):
    consent_accept(study_id=consent_study.pk, rater=assignment.rater)
    assert _save(alice, assignment).status_code == 200
    consent_text_publish(study=consent_study, text=TEXT + " Version two.")
    assert _save(alice, assignment, score=4).status_code == 409  # the old tab saves nothing
    consent_accept(study_id=consent_study.pk, rater=assignment.rater)
    assert _save(alice, assignment, score=4).status_code == 200


@pytest.mark.parametrize("rule", [ConsentText.OnWithdrawal.KEEP, ConsentText.OnWithdrawal.REMOVE])
def test_withdrawal_stops_new_work_and_handles_ratings_as_the_text_says(
    alice, study, assignment, rule
):
    consent_text_publish(study=study, text=TEXT, on_withdrawal=rule)
    consent_url = reverse("annotation:consent", args=[study.pk])
    alice.post(consent_url, {"action": "accept"})
    assert _save(alice, assignment).status_code == 200
    assert Rating.objects.filter(rater=assignment.rater).count() == 1

    alice.post(consent_url, {"action": "withdraw"})
    kept = Rating.objects.filter(rater=assignment.rater).count()
    assert kept == (1 if rule == ConsentText.OnWithdrawal.KEEP else 0)
    record = ConsentRecord.objects.get(rater=assignment.rater)
    assert record.withdrawn_at is not None and record.ratings_removed == 1 - kept
    # No new work: open tasks are reclaimed (audited), saves refused, consent not re-given.
    open_left = Assignment.objects.filter(
        rater=assignment.rater, status__in=["pending", "in_progress"]
    )
    assert not open_left.exists()
    assert assignment.changes.filter(new_value__contains="consent withdrawn").exists()
    assert _save(alice, assignment, score=5).status_code in (404, 409)  # reclaimed: not hers
    assert Rating.objects.filter(rater=assignment.rater).count() == kept
    with pytest.raises(ConsentError, match="withdrew"):
        consent_accept(study_id=study.pk, rater=assignment.rater)


def test_a_published_consent_text_cannot_be_emptied(study):
    with pytest.raises(ConsentError, match="empty"):
        consent_text_publish(study=study, text="  ")
    assert not ConsentText.objects.exists()


def test_credentials_and_consent_reach_the_datasheet_naming_no_one(
    alice, consent_study, assignment
):
    response = alice.post(
        reverse("annotation:credentials"),
        {"specialty": "Psychiatry", "years_in_practice": 12, "licence": "GMC 1234567",
         "conflicts_of_interest": ""},
    )  # fmt: skip
    assert response.status_code == 302
    consent_accept(study_id=consent_study.pk, rater=assignment.rater)
    _save(alice, assignment)
    summary = clinicians_summary(study=consent_study)
    assert summary.clinicians == 1
    # One clinician: the count is masked so that the specialty does not single them out.
    assert summary.specialties == [("psychiatry", "fewer than 3")]
    assert summary.years == [("10-19 years", "fewer than 3")]
    assert summary.consents == [(1, 1, 0)]
    from analysis.datasheet import clinicians_section

    text = "\n".join(clinicians_section(consent_study))
    assert "psychiatry" in text and "v1" in text
    assert "alice" not in text and "GMC" not in text


def test_the_consent_page_is_only_for_the_studys_clinicians(client, other_clinician, consent_study):
    client.force_login(other_clinician.user)  # assigned nothing in this study
    assert client.get(reverse("annotation:consent", args=[consent_study.pk])).status_code == 404
