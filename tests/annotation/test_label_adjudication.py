"""Adjudicating distortion labels (docs/adjudication.md, "Distortion labels"): the disagreement
rule, the queue, who may open it, blinding, saving, and the gold label with its provenance in
κ_F1 and the exports."""

from __future__ import annotations

import csv
import io
import itertools
import re

import pytest

from accounts.roles import ADMIN, RESEARCHER
from analysis.distortion_selectors import consensus_export_rows, distortion_report
from analysis.distortions.consensus import consensus_labels
from analysis.distortions.evaluation import kappa_f1_report
from annotation.label_adjudication_selectors import (
    ADJUDICATED,
    AWAITING,
    CONSENSUS,
    SINGLE,
    clinicians_agreed_labels,
    gold_labels,
    label_adjudication_queue,
)
from annotation.membership import ADJUDICATOR, LEAD, member_add
from annotation.models import Conversation, LabelAdjudication, LabelAnnotation, Rater
from annotation.rater_codes import rater_codes_assign
from annotation.selectors import study_label_names
from annotation.services.label_adjudication import (
    LabelAdjudicationRefused,
    label_adjudication_save,
)
from tests.factories import (
    clinician_make,
    distortion_study_make,
    labelled_distortion_study_make,
    study_make,
    user_make,
)

from .conftest import at_once

pytestmark = pytest.mark.django_db

LAB, MR, MF, OG, ND = (
    "Labeling",
    "Mind Reading",
    "Mental Filter",
    "Overgeneralization",
    "No Distortion",
)


def _label(rater: Rater, conversation: Conversation, labels: list[str], **extra) -> None:
    LabelAnnotation.objects.create(
        rater=rater,
        conversation=conversation,
        status=extra.pop("status", "complete"),
        source=extra.pop("source", "form"),
        labels=labels,
        **extra,
    )
    # The clinician joined the study with their first work (an assignment or import does it).
    rater_codes_assign(study_id=conversation.study_id, rater_ids=[rater.pk])


def _setup(scheme: str) -> dict:
    """m0: no label in common; m1: the same two labels, dominants swapped; m2: one label in
    common, same dominant; m3: one clinician; m4: nobody; m5: practice, disagreeing."""
    study = distortion_study_make(
        messages=[f"message {i}" for i in range(6)], scheme=scheme, name=f"CD adj {scheme}"
    )
    m = {c.external_id: c for c in Conversation.objects.filter(study=study)}
    a, b = clinician_make(username="dr_alfa_name"), clinician_make(username="dr_bravo_name")
    _label(a, m["m0"], [LAB])
    _label(b, m["m0"], [MR])
    _label(a, m["m1"], [LAB, MF])
    _label(b, m["m1"], [MF, LAB])
    _label(a, m["m2"], [LAB, MR])
    _label(b, m["m2"], [LAB])
    _label(a, m["m3"], [ND])
    Conversation.objects.filter(pk=m["m5"].pk).update(practice=True)
    _label(a, m["m5"], [LAB])
    _label(b, m["m5"], [MR])
    # Not study data: a draft and an LLM's labels never open a dispute.
    c = clinician_make(username="dr_charlie_name")
    _label(c, m["m2"], [OG], status="draft")
    judge = Rater.objects.create(kind=Rater.Kind.JUDGE, name="zz-label-judge")
    LabelAnnotation.objects.create(
        rater=judge, conversation=m["m3"], status="complete", source="judge", labels=[OG]
    )
    adjudicator = user_make(username=f"adj_{scheme}")
    member_add(study=study, user=adjudicator, role=ADJUDICATOR)
    return {"study": study, "m": m, "raters": (a, b), "adjudicator": adjudicator}


@pytest.fixture
def ranked(db):
    return _setup("ranked")


@pytest.fixture
def multi(db):
    return _setup("multi")


# --- The rule -----------------------------------------------------------------------------------


NAMES = [LAB, MR, MF, OG, ND]


@pytest.mark.parametrize("scheme", ["ranked", "multi"])
def test_the_rule_is_appendix_g_with_every_clinician_as_a_run_and_k_all(scheme):
    """Agreement = consensus_labels with k = n over the clinicians' labels (plus, ranked, the
    same dominant); disagreement = its 'no consensus' fallbacks."""
    if scheme == "ranked":
        choices = [[x] for x in NAMES] + [
            [x, y] for x, y in itertools.permutations(NAMES, 2) if ND not in (x, y)
        ]
    else:
        choices = [[x] for x in NAMES] + [
            sorted(s, key=NAMES.index) for r in (2, 3) for s in itertools.combinations(NAMES[:4], r)
        ]
    for n in (2, 3):
        for lists in itertools.product(choices[:12], repeat=n):
            agreed = clinicians_agreed_labels(label_lists=lists, scheme=scheme, names=NAMES)
            reference = consensus_labels(
                lists, k=n, n=n, labels=[{"name": x} for x in NAMES], scheme=scheme
            )
            same_dominant = len({run[0] for run in lists}) == 1
            if reference.rule != "threshold" or (scheme == "ranked" and not same_dominant):
                assert agreed is None, lists
            else:
                assert agreed == reference.labels, lists


def test_one_clinician_is_no_disagreement_and_others_beside_a_label_is_dropped():
    assert clinicians_agreed_labels(label_lists=[[LAB]], scheme="multi", names=NAMES) is None
    assert clinicians_agreed_labels(
        label_lists=[[LAB, "Others"], [LAB]], scheme="multi", names=NAMES
    ) == [LAB]


# --- The queue ----------------------------------------------------------------------------------


def test_ranked_queue_holds_no_common_label_and_different_dominants(
    ranked, django_assert_max_num_queries
):
    with django_assert_max_num_queries(4):
        rows = label_adjudication_queue(study=ranked["study"])
    m = ranked["m"]
    assert [row.conversation for row in rows] == ["m0", "m1"]
    assert [row.conversation_id for row in rows] == [m["m0"].pk, m["m1"].pk]
    assert all(row.n_clinicians == 2 and not row.adjudicated for row in rows)


def test_multi_queue_holds_only_no_common_label(multi):
    assert [row.conversation for row in label_adjudication_queue(study=multi["study"])] == ["m0"]


def test_an_adjudicated_message_stays_in_the_queue_after_the_open_ones(ranked):
    label_adjudication_save(
        study=ranked["study"],
        conversation_id=ranked["m"]["m0"].pk,
        labels=[MR],
        user=ranked["adjudicator"],
    )
    rows = label_adjudication_queue(study=ranked["study"])
    assert [(row.conversation, row.adjudicated) for row in rows] == [("m1", False), ("m0", True)]


# --- Access -------------------------------------------------------------------------------------


def _urls(setup) -> list[str]:
    study = setup["study"]
    return [
        f"/adjudicate/{study.pk}/labels/",
        f"/adjudicate/{study.pk}/labels/{setup['m']['m0'].pk}/",
    ]


def test_the_studys_adjudicator_and_admins_open_the_pages(ranked, client):
    study = ranked["study"]
    for user in (ranked["adjudicator"], user_make(username="adm", role=ADMIN)):
        client.force_login(user)
        for url in _urls(ranked):
            assert client.get(url).status_code == 200, url
        index = client.get("/adjudicate/").content.decode()
        assert f'href="/adjudicate/{study.pk}/labels/"' in index
        # The study's queue address leads to its label queue (it answered 404).
        answer = client.get(f"/adjudicate/{study.pk}/")
        assert (answer.status_code, answer["Location"]) == (302, f"/adjudicate/{study.pk}/labels/")
    # A message that is not this study's real work: practice, or another study's.
    elsewhere = distortion_study_make(messages=["x"])
    for conversation in (ranked["m"]["m5"], Conversation.objects.get(study=elsewhere)):
        url = f"/adjudicate/{study.pk}/labels/{conversation.pk}/"
        assert client.get(url).status_code == 404
        assert client.post(url, {"dominant": LAB}).status_code == 404
    # A response-rating study has no label queue.
    rating_study = study_make(name="Rated", conversations=1)
    assert client.get(f"/adjudicate/{rating_study.pk}/labels/").status_code == 404
    assert not LabelAdjudication.objects.exists()


def test_everyone_else_is_refused_and_nothing_is_written(ranked, client):
    other_study = distortion_study_make(messages=["x"], name="Someone else's")
    elsewhere = user_make(username="adj_elsewhere")
    member_add(study=other_study, user=elsewhere, role=ADJUDICATOR)
    lead = user_make(username="the_lead")
    member_add(study=ranked["study"], user=lead, role=LEAD)
    refused = {
        elsewhere: 404,
        ranked["raters"][0].user: 403,
        user_make(username="platform_researcher", role=RESEARCHER): 403,
        lead: 403,
    }
    for user, status in refused.items():
        client.force_login(user)
        for url in _urls(ranked):
            assert client.get(url).status_code == status, (user.username, url)
            response = client.post(url, {"dominant": LAB})
            assert response.status_code in (status, 405), (user.username, url)
    client.logout()
    for url in _urls(ranked):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not LabelAdjudication.objects.exists()


# --- Blinding -----------------------------------------------------------------------------------


def test_pages_show_clinicians_as_letters_with_their_labels_and_nothing_else(ranked, client):
    from analysis.pseudonyms import rater_codes

    study, m = ranked["study"], ranked["m"]
    LabelAnnotation.objects.filter(conversation=m["m0"], labels=[MR]).update(
        labels=["Others"], others=["Catastrophising"]
    )
    forbidden = list(rater_codes(study_id=study.pk).values())
    for rater in Rater.objects.filter(kind=Rater.Kind.CLINICIAN):
        forbidden += [rater.name, rater.user.username]
    forbidden.append("zz-label-judge")
    client.force_login(ranked["adjudicator"])
    pages = [f"/adjudicate/{study.pk}/labels/"] + [
        f"/adjudicate/{study.pk}/labels/{m[x].pk}/" for x in ("m0", "m1", "m2", "m3")
    ]
    for url in pages:
        html = client.get(url).content.decode()
        leaked = [
            word
            for word in forbidden
            if re.search(rf"(?<![A-Za-z0-9]){re.escape(word)}(?![A-Za-z0-9])", html)
        ]
        assert not leaked, f"{url} shows {leaked}"
    html = client.get(f"/adjudicate/{study.pk}/labels/{m['m0'].pk}/").content.decode()
    assert "Clinician A</dt><dd><strong>Labeling</strong> (dominant)" in html
    assert "Clinician B</dt><dd><strong>Others</strong> (dominant)" in html
    assert "Catastrophising" in html  # the out-of-list label as the clinician wrote it
    html = client.get(f"/adjudicate/{study.pk}/labels/{m['m1'].pk}/").content.decode()
    assert "; Mental Filter (secondary)" in html and "; Labeling (secondary)" in html
    # Agreed or single-clinician messages: nothing to settle, no form.
    html = client.get(f"/adjudicate/{study.pk}/labels/{m['m2'].pk}/").content.decode()
    assert "Nothing to adjudicate on this message" in html and 'name="dominant"' not in html


# --- Saving -------------------------------------------------------------------------------------


def test_a_plain_post_saves_and_saving_again_updates_the_same_row(ranked, client):
    study, m0 = ranked["study"], ranked["m"]["m0"]
    client.force_login(ranked["adjudicator"])
    url = f"/adjudicate/{study.pk}/labels/{m0.pk}/"
    data = {"dominant": MR, "secondary": LAB, "reason": "rater_error", "reason_text": " typo "}
    response = client.post(url, data)
    assert response.status_code == 302 and response["Location"] == url
    saved = LabelAdjudication.objects.get()
    assert (saved.labels, saved.reason, saved.reason_text) == ([MR, LAB], "rater_error", "typo")
    assert saved.adjudicator == ranked["adjudicator"] and saved.study == study
    first = saved.created_at
    assert client.post(url, data).status_code == 302  # the same again: one row, same values
    again = LabelAdjudication.objects.get()
    assert (again.pk, again.labels, again.created_at) == (saved.pk, [MR, LAB], first)
    response = client.post(
        url, {"dominant": LAB, "secondary": "", "reason": ""}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 200 and "Saved" in response.content.decode()
    saved = LabelAdjudication.objects.get()
    assert (saved.labels, saved.reason) == ([LAB], "")
    page = client.get(url).content.decode()
    assert f'name="dominant" value="{LAB}" checked' in page
    assert 'name="secondary" value="" checked' in page


def test_multi_scheme_saves_the_ticked_labels_in_the_label_sets_order(multi, client):
    study, m0 = multi["study"], multi["m"]["m0"]
    client.force_login(multi["adjudicator"])
    url = f"/adjudicate/{study.pk}/labels/{m0.pk}/"
    names = study_label_names(study_id=study.pk)
    assert names.index(MR) < names.index(LAB)
    assert client.post(url, {"labels": [LAB, MR], "reason": "other"}).status_code == 302
    assert LabelAdjudication.objects.get().labels == [MR, LAB]
    assert (
        'type="checkbox" name="labels" value="Labeling" checked' in client.get(url).content.decode()
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "choose a dominant label"),
        ({"secondary": LAB}, "choose the dominant label first"),
        ({"dominant": "Catastrophising"}, "not a label of this study"),
        ({"dominant": LAB, "secondary": LAB}, "must differ"),
        ({"dominant": ND, "secondary": LAB}, "cannot be combined"),
        ({"dominant": LAB, "reason": "because"}, "unknown reason"),
        ({"dominant": LAB, "reason_text": "x" * 2001}, "reason_text"),
    ],
)
@pytest.mark.parametrize("htmx", [False, True])
def test_bad_input_is_refused_with_400_and_writes_nothing(ranked, client, data, message, htmx):
    study, m0 = ranked["study"], ranked["m"]["m0"]
    client.force_login(ranked["adjudicator"])
    url = f"/adjudicate/{study.pk}/labels/{m0.pk}/"
    headers = {"HX-Request": "true"} if htmx else {}
    response = client.post(url, data, headers=headers)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not LabelAdjudication.objects.exists()


def test_a_message_the_clinicians_agree_on_is_refused(ranked, client):
    study, m = ranked["study"], ranked["m"]
    client.force_login(ranked["adjudicator"])
    for name in ("m2", "m3", "m4"):  # agreed, one clinician, nobody
        response = client.post(f"/adjudicate/{study.pk}/labels/{m[name].pk}/", {"dominant": LAB})
        assert response.status_code == 400, name
        assert "do not disagree" in response.content.decode()
    with pytest.raises(LabelAdjudicationRefused, match="no such message"):
        label_adjudication_save(
            study=study, conversation_id=m["m5"].pk, labels=[LAB], user=ranked["adjudicator"]
        )
    assert not LabelAdjudication.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_saves_leave_one_row():
    setup = _setup("ranked")
    m0 = setup["m"]["m0"]

    def save(labels: list[str]):
        return lambda: label_adjudication_save(
            study=setup["study"], conversation_id=m0.pk, labels=labels, user=setup["adjudicator"]
        )

    first, second = at_once(save([LAB]), save([MR]))
    saved = LabelAdjudication.objects.get()
    assert first.pk == second.pk == saved.pk and saved.labels in ([LAB], [MR])


# --- Gold labels, κ_F1 and the exports ----------------------------------------------------------


def test_gold_labels_and_their_provenance(ranked):
    study, m = ranked["study"], ranked["m"]
    gold = gold_labels(study=study)
    assert {c: (g.labels, g.provenance, g.n_clinicians) for c, g in gold.items()} == {
        m["m0"].pk: ([], AWAITING, 2),
        m["m1"].pk: ([], AWAITING, 2),
        m["m2"].pk: ([LAB], CONSENSUS, 2),
        m["m3"].pk: ([ND], SINGLE, 1),
    }
    label_adjudication_save(
        study=study, conversation_id=m["m1"].pk, labels=[MF, LAB], reason="rater_error",
        user=ranked["adjudicator"],
    )  # fmt: skip
    gold = gold_labels(study=study)[m["m1"].pk]
    assert (gold.labels, gold.provenance, gold.reason) == ([MF, LAB], ADJUDICATED, "rater_error")


def _second_clinician(study, labels: dict[str, list[str]]) -> None:
    other = clinician_make(username="dr_second_name")
    for conversation in Conversation.objects.filter(study=study, external_id__in=labels):
        _label(other, conversation, labels[conversation.external_id])


def test_kappa_f1_and_the_exports_use_the_adjudicated_gold(client, researcher):
    """The dashboard's study (tests.factories): runs' final labels m0 Labeling, m1 No
    Distortion, m4 Labeling; clinician one said m0 Labeling, m1 No Distortion, m4 Mental
    Filter. A second clinician disagrees on m4 (Labeling), agrees on m1, and alone labels m2."""
    study, run = labelled_distortion_study_make()
    _second_clinician(study, {"m4": [LAB], "m1": [ND], "m2": [MF]})
    ids = dict(Conversation.objects.filter(study=study).values_list("external_id", "pk"))

    report = distortion_report(study=study)
    (config,) = report.configurations
    awaiting, _ = report.gold_kappa_f1(config)
    # Before adjudication m4 has no gold: m0 (single) and m1 (consensus) count; m2's final
    # label is ambiguous, m3 has no gold.
    expected = kappa_f1_report([LAB, ND], [LAB, ND], kind="multiclass")
    assert (awaiting.n_items, awaiting.kappa_f1) == (2, expected.kappa_f1)

    adjudicator = user_make(username="adj_cd")
    member_add(study=study, user=adjudicator, role=ADJUDICATOR)
    assert [r.conversation for r in label_adjudication_queue(study=study)] == ["m4"]
    label_adjudication_save(
        study=study, conversation_id=ids["m4"], labels=[MF], reason="rater_error", user=adjudicator
    )
    report = distortion_report(study=study)
    (config,) = report.configurations
    settled, left_out = report.gold_kappa_f1(config)
    # m4's gold is now the adjudicated Mental Filter, against the runs' Labeling.
    expected = kappa_f1_report([LAB, ND, MF], [LAB, ND, LAB], kind="multiclass")
    assert settled.n_items == 3 and left_out == 1  # m2: ambiguous final label
    assert settled.kappa_f1 == pytest.approx(expected.kappa_f1)
    assert settled.f1 == pytest.approx(expected.f1)

    gold = report.table("gold").set_index("item")
    assert gold.loc["m4", "gold_labels"] == MF and gold.loc["m4", "provenance"] == ADJUDICATED
    assert gold.loc["m1", "provenance"] == CONSENSUS and gold.loc["m0", "provenance"] == SINGLE
    assert gold.loc["m2", "provenance"] == SINGLE and "m3" not in gold.index
    kappa = report.table("gold_kappa_f1").iloc[0]
    assert kappa["n_items"] == 3 and kappa["kappa_f1"] == pytest.approx(expected.kappa_f1)

    header, rows = consensus_export_rows(report=report, run_id=run.pk)
    assert header[-2:] == ["gold_labels", "gold_provenance"]
    by_item = {row[0]: row[-2:] for row in rows}
    assert by_item == {
        "m0": [LAB, SINGLE],
        "m1": [ND, CONSENSUS],
        "m2": [MF, SINGLE],
        "m3": ["", ""],
        "m4": [MF, ADJUDICATED],
    }

    client.force_login(researcher)
    response = client.get(f"/analysis/distortions/{study.pk}/runs/{run.pk}/labels.csv")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    text = body.decode("utf-8-sig")
    exported = {r["item"]: r for r in csv.DictReader(io.StringIO(text))}
    assert (exported["m4"]["gold_labels"], exported["m4"]["gold_provenance"]) == (MF, ADJUDICATED)
    response = client.get(f"/analysis/distortions/{study.pk}/tables/gold.csv")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    table = {r["item"]: r for r in csv.DictReader(io.StringIO(body.decode("utf-8-sig")))}
    assert table["m4"]["provenance"] == ADJUDICATED and table["m4"]["gold_labels"] == MF
    html = client.get(f"/analysis/distortions/{study.pk}/").content.decode()
    assert "κ_F1 of the final labels against the clinicians&#x27; gold" in html or (
        "κ_F1 of the final labels against the clinicians' gold" in html
    )
