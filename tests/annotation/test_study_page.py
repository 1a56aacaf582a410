"""The study page (/manage/?study=N): the study's life in the order a lead works, each step
saying what is done and what comes next; forms that keep their study; the assignment form's
defaults that give agreement; the list of studies; the training page's practice first."""

from __future__ import annotations

import re

from django.urls import reverse

from annotation.admin_selectors import assign_defaults, study_steps
from annotation.models import Assignment
from annotation.services import assignments_create
from tests.factories import clinician_make, endpoint_make, study_make

MANAGE = reverse("annotation:manage")
SECTIONS = ["conversations", "clinicians", "practice", "assign", "progress", "topup", "judges",
            "sample", "results", "release"]  # fmt: skip


def _page(client, study) -> str:
    response = client.get(MANAGE, {"study": study.pk})
    assert response.status_code == 200
    return response.content.decode()


def _state(steps, key: str) -> tuple[str, bool]:
    (step,) = [s for s in steps if s.key == key]
    return step.state, step.next


def test_the_sections_come_in_the_order_of_the_studys_life(admin_member_client, db):
    study = study_make(name="Life", conversations=3)
    html = _page(admin_member_client, study)
    positions = [html.index(f'<section class="card" id="{key}">') for key in SECTIONS]
    assert positions == sorted(positions)
    # The steps list links to each section and says which comes next.
    steps = re.search(r'<ol class="study-steps" id="study-steps">(.*?)</ol>', html, re.S).group(1)
    assert 'class="step-done"><a href="#conversations">' in steps
    assert 'class="step-todo step-next"><a href="#clinicians">' in steps


def test_each_step_says_what_is_done_and_what_comes_next(db):
    study = study_make(name="Steps", conversations=4)
    assert _state(study_steps(study=study), "clinicians") == ("todo", True)
    ann, ben = clinician_make(username="ann"), clinician_make(username="ben")
    steps = study_steps(study=study)
    assert _state(steps, "clinicians") == ("done", False)
    assert _state(steps, "practice")[0] == "optional"  # no practice marked: not in the way
    assert _state(steps, "assign") == ("todo", True)
    # One clinician per conversation: agreement has nothing to compare, so still to do.
    assignments_create(study=study, clinicians=[ann, ben])
    steps = study_steps(study=study)
    (assign,) = [s for s in steps if s.key == "assign"]
    assert assign.state == "todo" and "agreement needs at least 2" in assign.summary
    assignments_create(study=study, clinicians=[ann, ben], overlap=2, overlap_fraction=1)
    steps = study_steps(study=study)
    assert _state(steps, "assign") == ("done", False)
    assert _state(steps, "progress")[0] == "waiting"
    for assignment in Assignment.objects.filter(conversation__study=study):
        assignment.status = Assignment.Status.SUBMITTED
        assignment.save(update_fields=["status"])
    assert _state(study_steps(study=study), "progress")[0] == "done"


def test_the_assignment_form_defaults_to_an_overlap_that_gives_agreement(admin_member_client, db):
    small = study_make(name="Small", conversations=6)
    assert assign_defaults(study=small) == {"study": small.pk, "overlap": 2, "overlap_percent": 100}
    html = _page(admin_member_client, small)
    assert re.search(r'name="overlap" value="2"', html)
    assert re.search(r'name="overlap_percent" value="100"', html)
    large = study_make(name="Large", conversations=120)
    # 30 conversations with two clinicians: 25 % of 120.
    assert assign_defaults(study=large)["overlap_percent"] == 25
    # Taken as offered, the defaults give every conversation two clinicians in a small study.
    ann, ben = clinician_make(username="ann"), clinician_make(username="ben")
    data = {**assign_defaults(study=small), "clinicians": [ann.pk, ben.pk]}
    response = admin_member_client.post(reverse("annotation:manage_assign"), data)
    assert response.status_code == 302 and response["Location"].endswith(
        f"?study={small.pk}#progress"
    )
    assert Assignment.objects.filter(conversation__study=small).count() == 12


def test_an_invite_keeps_the_study_and_shows_the_link_once(admin_member_client, db):
    study = study_make(name="Invite study", conversations=1)
    response = admin_member_client.post(
        reverse("annotation:manage_invite"), {"username": "dora", "study": study.pk}
    )
    assert response.status_code == 302
    assert response["Location"] == f"{MANAGE}?study={study.pk}#password-link-card"
    page = admin_member_client.get(response["Location"]).content.decode()
    assert "<h1>Invite study</h1>" in page
    assert re.search(r'id="password-link">http://testserver/accounts/set-password/', page)
    # Shown once: the link is in no later page.
    assert 'id="password-link"' not in _page(admin_member_client, study)
    # Invited from the study's page: on its team at once, as a lead's invite puts them.
    from annotation.models import StudyMember

    assert list(StudyMember.objects.filter(study=study).values_list("user__username", "role")) == [
        ("dora", "clinician")
    ]


def test_an_invite_from_the_list_of_studies_joins_no_study(admin_member_client, db):
    from annotation.models import StudyMember

    study_make(name="Elsewhere", conversations=1)
    response = admin_member_client.post(reverse("annotation:manage_invite"), {"username": "ed"})
    assert response.status_code == 302
    assert not StudyMember.objects.filter(user__username="ed").exists()


def test_a_refused_invite_stays_on_the_study_page(admin_member_client, db):
    study = study_make(name="Refusal study", conversations=1)
    clinician_make(username="dora")
    response = admin_member_client.post(
        reverse("annotation:manage_invite"), {"username": "Dora", "study": study.pk}
    )
    assert response.status_code == 422
    html = response.content.decode()
    assert "<h1>Refusal study</h1>" in html and "taken" in html


def test_the_list_of_studies_says_where_each_one_is(admin_member_client, db):
    study_make(name="Alpha", conversations=2)
    ready = study_make(name="Beta", conversations=2)
    ann, ben = clinician_make(username="ann"), clinician_make(username="ben")
    assignments_create(study=ready, clinicians=[ann, ben], overlap=2, overlap_fraction=1)
    html = admin_member_client.get(MANAGE).content.decode()
    alpha = re.search(r"<tr><td><a [^>]*>Alpha</a>.*?</tr>", html, re.S).group(0)
    beta = re.search(r"<tr><td><a [^>]*>Beta</a>.*?</tr>", html, re.S).group(0)
    assert "#assign" in alpha and "Give the conversations to the clinicians" in alpha
    assert "#assign" not in beta
    # Clinicians' accounts and the invite are on the list too.
    assert 'id="clinician-accounts"' in html and 'name="username"' in html


def test_the_judges_step_lists_the_studys_own_runs_and_leads_to_a_launch(admin_member_client, db):
    from judging.models import Run

    study = study_make(name="Judged", conversations=1)
    other = study_make(name="Other", conversations=1)
    endpoint = endpoint_make(base_url="http://127.0.0.1:9/v1")
    mine = Run.objects.create(kind=Run.Kind.JUDGE, study=study, endpoint=endpoint)
    Run.objects.create(kind=Run.Kind.JUDGE, study=other, endpoint=endpoint)
    html = _page(admin_member_client, study)
    fragment_url = reverse("judging:study_runs", args=[study.pk])
    assert f'hx-get="{fragment_url}"' in html
    fragment = admin_member_client.get(fragment_url).content.decode()
    assert re.findall(r'href="/judging/runs/(\d+)/"', fragment) == [str(mine.pk)]
    assert f'href="{reverse("judging:judge_new")}?study={study.pk}"' in fragment


def test_a_labelling_study_leads_to_labelling_runs_and_its_own_results(admin_member_client, db):
    from annotation.models import Study
    from annotation.services import study_get_or_create

    study, _ = study_get_or_create(
        name="Labels", kind=Study.Kind.DISTORTION_LABELLING, label_scheme="ranked"
    )
    html = _page(admin_member_client, study)
    results = html.split('id="results"')[1].split("</section>")[0]
    assert reverse("analysis:distortions", args=[study.pk]) in results
    assert reverse("analysis:dashboard", args=[study.pk]) not in results
    fragment = admin_member_client.get(reverse("judging:study_runs", args=[study.pk]))
    fragment_html = fragment.content.decode()
    assert f'href="{reverse("judging:labelling_new")}?study={study.pk}"' in fragment_html
    assert "judge_new" not in fragment_html and reverse("judging:judge_new") not in fragment_html


def test_the_training_page_offers_practice_first(admin_member_client, db):
    study = study_make(name="Training", conversations=2)
    html = admin_member_client.get(
        reverse("annotation:manage_training"), {"study": study.pk}
    ).content.decode()
    headings = re.findall(r"<h2>(.*?)</h2>", html)
    assert headings[0] == "Give clinicians the practice conversations"


def test_the_progress_table_counts_each_kind_of_task_apart(admin_member_client, db):
    from annotation.training import practice_conversations_mark

    study = study_make(name="Kinds", conversations=3)
    ann = clinician_make(username="ann")
    clinician_make(username="ben")  # invited, nothing yet
    practice_conversations_mark(study=study, external_ids=["c2"])
    Assignment.objects.create(
        conversation=study.conversations.get(external_id="c2"), rater=ann,
        kind=Assignment.Kind.PRACTICE,
    )  # fmt: skip
    assignments_create(study=study, clinicians=[ann])
    html = _page(admin_member_client, study)
    ann_row = re.search(r"<tr><td>ann <span[^>]*>\(not started\)</span></td>(.*?)</tr>", html, re.S)
    ann_row = ann_row.group(1)
    assert re.findall(r"<td>([^<]*)</td>", ann_row)[:3] == ["0 / 1", "0", "2"]
    assert re.search(r"<tr><td>ben <span class=\"muted\">\(not started\)</span>", html)


def test_why_a_row_cannot_move_is_said_once_not_on_every_row(admin_member_client, db):
    """Two clinicians on every conversation: no waiting row can move to the other. The reason was
    a sentence on each of them ("No other clinician can take it: ..." twelve times on a small
    study); it is said once above the table, and each such row shows a dash."""
    study = study_make(name="Unmovable", conversations=6)
    ann, ben = clinician_make(username="ann"), clinician_make(username="ben")
    assignments_create(study=study, clinicians=[ann, ben], overlap=2, overlap_fraction=1)
    html = _page(admin_member_client, study)
    assert Assignment.objects.filter(conversation__study=study).count() == 12
    assert html.count("already holds") == 1 and 'id="no-candidate-note"' in html
    assert html.count('class="muted no-candidate"') == 12
    assert "No other clinician can take it" not in html
