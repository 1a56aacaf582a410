"""Every page of every role, in chromium at 360 and 1280 px: nothing wider than the screen outside
a scroll region, and no serious or critical axe-core violation.

The pages are not listed here: they come from tests/test_url_access.py's EXPECTED table, every
GET a role may open with 200 that answers HTML (CSV, JSON and other downloads are not pages). A
URL added there is visited here at once, filled from the same `world` fixture. Its values are
enriched below so that detail pages have content: the study behind `{study_id}` has clinician and
judge ratings (the dashboards draw their charts), `{run_id}` is joined by a judge run with items.
A placeholder that neither the world nor EXTRA_OBJECTS can fill fails the test by name: a page
is never skipped for want of an object. docs/accessibility.md says how to add one.
"""

from __future__ import annotations

import string

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests import test_url_access
from tests.axe import AXE
from tests.conftest import SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A dashboard's first computation (bootstrap) on a busy two-core test machine takes a while.
SLOW_MS = 180_000
# What chromium asks for when it opens an address.
ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
WIDTHS = (360, 1280)
ROLES = test_url_access.ROLES


@pytest.fixture
def world(transactional_db) -> dict:
    """The walk's world, built by the walk's own builder (a key added there fills new URLs here
    too) and committed: the live server reads it over its own connection."""
    return test_url_access.world_build()


# Pages beyond EXPECTED's own cases: the same pattern with another object worth seeing.
EXTRA_PAGES: dict[str, list[str]] = {
    "judging/runs/<int:pk>/": ["/judging/runs/{judge_run_id}/"],
    "manage/": ["/manage/?study={study_id}"],  # the study page (without: the list of studies)
}

# The phone-width views the documentation shows (docs/accessibility.md), by route.
SCREENSHOT_AT_360 = {
    "analysis/studies/<int:study_id>/": "dashboard",
    "analysis/studies/<int:study_id>/judge-assisted/": "judge-assisted",
}

# Placeholder -> what makes it (beyond the walk's world): see _objects_make.
EXTRA_OBJECTS = {
    "study_id": "a study with two clinicians' and three judges' ratings (tests/analysis)",
    "judge_run_id": "a finished judge run on that study, with items",
    "response_id": "a response of that study, disputed by its clinicians where one is",
}

# Elements wider than the screen are fine only inside one of these (and the page itself must
# not scroll sideways): a table in a labelled scroll region, a chart that scrolls.
OVERFLOW_JS = """
() => {
  const width = document.documentElement.clientWidth;
  const scrolls = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const x = getComputedStyle(p).overflowX;
      if (x === "auto" || x === "scroll") return true;
    }
    return false;
  };
  const describe = (el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += "#" + el.id;
    if (el.classList.length) s += "." + [...el.classList].join(".");
    const named = el.parentElement && el.parentElement.closest("[id]");
    if (named && !el.id) s = "#" + named.id + " " + s;
    return s;
  };
  const out = [];
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if (r.right <= width + 1 && r.left >= -1) continue;
    const style = getComputedStyle(el);
    if (style.visibility === "hidden" || style.position === "fixed") continue;
    if (scrolls(el)) continue;
    if (el.parentElement && out.some((o) => o.el.contains(el))) continue;
    const span = " (" + Math.round(r.left) + ".." + Math.round(r.right) + ")";
    out.push({el, text: describe(el) + span});
  }
  const page = document.documentElement.scrollWidth;
  const result = out.slice(0, 5).map((o) => o.text);
  if (page > width + 1) result.unshift("the page is " + page + " px wide");
  return result;
}
"""

# Words of a table cell that the layout broke across lines ("cli/ni/ci/an"): each word, a run
# of letters or digits, as a DOM range whose boxes sit on more than one line.
BROKEN_WORDS_JS = """
() => {
  const broken = [];
  for (const cell of document.querySelectorAll("main th, main td")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.textContent.matchAll(/[\\p{L}\\p{N}]{2,}/gu)) {
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (tops.size > 1) broken.push(match[0]);
      }
    }
  }
  return [...new Set(broken)].slice(0, 8);
}
"""

# Pages that draw after load: wait for their charts and Swagger UI before measuring.
READY_JS = """
() => [...document.querySelectorAll("[data-vega-spec]")].every(
        (el) => el.dataset.drawn || el.textContent.includes("could not be drawn"))
      && (!document.querySelector("#swagger-ui") || document.querySelector(".swagger-ui .info"))
"""

# axe runs only those of its default rules (enabled, not experimental) that can report a serious
# or critical violation: a rule's own impact, where it has one, overrides its checks'. The others
# (region, landmarks, heading order: minor or moderate by definition, and among the slowest)
# could never fail this test and only cost time. test_axe_runs_every_rule_that_can_fail_the_walk
# holds axe-core to both.
AXE_RULES_JS = """
() => {
  const high = (impact) => impact === "serious" || impact === "critical";
  const checks = axe._audit.data.checks;
  return axe._audit.rules
    .filter((rule) => rule.enabled && !rule.tags.includes("experimental"))
    .filter((rule) => rule.impact ? high(rule.impact)
      : [...rule.any, ...rule.all, ...rule.none].some((c) => high(checks[c.id || c]?.impact)))
    .map((rule) => rule.id);
}
"""
AXE_JS = """
(rules) => axe.run(document, {
    resultTypes: ["violations"], ...(rules ? {runOnly: {type: "rule", values: rules}} : {})})
  .then((r) => r.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => v.id + " " + v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(" | ")))
"""


def pages_for(role: str) -> list[tuple[str, str]]:
    """(route, URL template) of every GET `role` may open with 200, EXPECTED's and EXTRA_PAGES'."""
    pages = []
    for route, cases in test_url_access.EXPECTED.items():
        for case in cases:
            if case.get is not None and case.get[role] == 200:
                pages.append((route, case.url))
                pages += [(route, url) for url in EXTRA_PAGES.get(route, [])]
    return pages


def _fill(template: str, objects: dict) -> str:
    names = [name for _, name, _, _ in string.Formatter().parse(template) if name]
    missing = [name for name in names if name not in objects]
    if missing:
        pytest.fail(
            f"{template} needs {missing}, which neither the walk's world "
            "(tests/test_url_access.py) nor EXTRA_OBJECTS in tests/test_browser_every_page.py "
            "makes: add a real object there, so that this page is visited"
        )
    return template.format(**objects)


def _objects_make(world: dict) -> dict:
    """The walk's world with richer objects behind some placeholders (EXTRA_OBJECTS)."""
    from annotation.models import Rater, Rating, Score
    from judging.models import ModelEndpoint, Run, RunItem
    from tests.factories import small_study_make

    small = small_study_make()
    # The judge the walk's judge-assisted URL names scores this study too.
    walk_judge = Rater.objects.get(name="walk-judge")
    for rating in Rating.objects.filter(rater=small.judges[1], status="complete").prefetch_related(
        "scores"
    ):
        copy = Rating.objects.create(
            rater=walk_judge, response=rating.response, status="complete", source="judge"
        )
        Score.objects.bulk_create(
            Score(rating=copy, attribute_id=s.attribute_id, value=max(1, s.value - 1))
            for s in rating.scores.all()
        )
    run = Run.objects.create(
        study=small.study,
        endpoint=ModelEndpoint.objects.get(name="walk-endpoint"),
        rater=walk_judge,
        kind=Run.Kind.JUDGE,
        status=Run.Status.DONE,
    )
    RunItem.objects.bulk_create(
        RunItem(run=run, response_id=r.response_id, status="done", input_tokens=900)
        for r in Rating.objects.filter(rater=walk_judge, response__conversation__study=small.study)
    )
    from annotation.adjudication_selectors import adjudication_queue
    from annotation.models import Response

    queue = adjudication_queue(study=small.study)
    response_id = (
        queue[0].response_id
        if queue
        else Response.objects.filter(conversation__study=small.study).first().pk
    )
    objects = dict(world, study_id=small.study.pk, judge_run_id=run.pk, response_id=response_id)
    assert set(EXTRA_OBJECTS) <= set(objects)
    return objects


def _session_cookie(user, base_url: str) -> dict:
    """A signed-in session for `user` (with the second factor staff and admins need)."""
    client = Client()
    client.force_login(user)  # conftest adds the TOTP step for privileged accounts
    name = settings.SESSION_COOKIE_NAME
    return {"name": name, "value": client.cookies[name].value, "url": base_url}


@pytest.mark.parametrize("role", ROLES)
def test_every_page_fits_a_phone_and_passes_axe(
    django_db_setup, chromium, live_server, world, role
):
    objects = _objects_make(world)
    pages = [(route, _fill(url, objects)) for route, url in pages_for(role)]
    assert pages, f"{role} opens no page at all?"
    problems: list[str] = []
    visited = 0
    # Whether a URL answers an HTML page does not depend on the width: asked once, at the first.
    is_page: dict[str, bool] = {}
    axe_rules: list[str] = []
    for width in WIDTHS:
        # axe is injected as a script of its own: only a context that bypasses the page's
        # policy admits it (tests/test_browser_csp.py checks the policy itself).
        context = chromium.new_context(
            base_url=live_server.url, viewport={"width": width, "height": 800}, bypass_csp=True
        )
        # axe is defined by an init script in every document of the context: compiled once per
        # renderer instead of injected into each page as a new script.
        context.add_init_script(path=str(AXE))
        if role != "anonymous":
            context.add_cookies([_session_cookie(objects["users"][role], live_server.url)])
        page = context.new_page()
        page.set_default_timeout(SLOW_MS)
        errors: list[str] = []
        page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
        for route, url in pages:
            if url not in is_page:
                head = context.request.get(
                    url, headers={"Accept": ACCEPT}, max_redirects=0, timeout=SLOW_MS
                )
                if head.status != 200:
                    problems.append(f"{url} ({route}) answered {head.status}, expected 200")
                # Not a page: a download or data.
                content_type = head.headers.get("content-type", "")
                is_page[url] = head.status == 200 and content_type.startswith("text/html")
            if not is_page[url]:
                continue
            response = page.goto(url)
            assert response is not None
            visited += 1
            where = f"{url} at {width} px as {role}"
            try:
                page.wait_for_function(READY_JS, timeout=60_000)
            except PlaywrightTimeout:
                problems.append(f"{where}: charts or Swagger UI not drawn within 60 s")
            for wide in page.evaluate(OVERFLOW_JS):
                problems.append(f"{where}: wider than the screen: {wide}")
            if width == 360:
                broken = page.evaluate(BROKEN_WORDS_JS)
                if broken:
                    problems.append(f"{where}: words broken inside a table cell: {broken}")
            axe_rules = axe_rules or page.evaluate(AXE_RULES_JS)
            for violation in page.evaluate(AXE_JS, axe_rules):
                problems.append(f"{where}: axe {violation}")
            for error in errors:
                problems.append(f"{where}: script error {error}")
            errors.clear()
            if role == "researcher" and width == 360 and route in SCREENSHOT_AT_360:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                shot = SCREENSHOTS / f"{SCREENSHOT_AT_360[route]}-360px.png"
                page.screenshot(path=str(shot), full_page=True)
        context.close()
    assert visited, f"{role}: no HTML page among {pages}"
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)


# A page that breaks rules of every impact, among them rules whose checks are serious or critical
# but whose own impact is minor or moderate (empty-heading, meta-viewport, scope-attr-valid), and
# an experimental rule that a default run leaves out (td-has-header: the last column's header is
# empty).
BAD_PAGE = """<!doctype html><html><head>
<meta name="viewport" content="width=device-width, user-scalable=no"></head><body>
<h1></h1><img src="x.png"><input type="text"><button></button><a href="#"></a>
<p style="color:#bbb;background:#fff">faint</p><div role="bogus">x</div>
<ul><div>not an item</div></ul><table><tr><th scope="foo">a</th></tr><tr><td>b</td></tr></table>
<table><tr><th>a</th><th>b</th><th></th></tr><tr><td>1</td><td>2</td><td>x</td></tr>
<tr><td>3</td><td>4</td><td>y</td></tr></table>
<span aria-labelledby="nobody" aria-hidden="maybe">x</span></body></html>"""

# Every result of a run, by rule.
AXE_RAN_JS = """
() => axe.run(document).then((r) => ["violations", "passes", "incomplete", "inapplicable"]
  .flatMap((kind) => r[kind].map((v) => [v.id, kind === "violations" ? v.impact : null])))
"""


def test_axe_runs_every_rule_that_can_fail_the_walk(chromium):
    """The walk runs only AXE_RULES_JS's rules: every one of them is a rule a default axe run
    runs, and on a page that breaks rules of every impact they find exactly the serious and
    critical violations a default run finds, while the default rules left out did fire, and
    only with minor or moderate impact: the restriction is exact, not lucky."""
    page = chromium.new_page()
    page.set_content(BAD_PAGE)
    page.add_script_tag(path=str(AXE))
    rules = page.evaluate(AXE_RULES_JS)
    ran = page.evaluate(AXE_RAN_JS)
    assert 0 < len(rules) and set(rules) < {rule for rule, _ in ran}
    assert "td-has-header" not in {rule for rule, _ in ran}, "experimental: not in a default run"
    default_run = page.evaluate(AXE_JS, None)
    assert len(default_run) >= 6, default_run
    assert sorted(page.evaluate(AXE_JS, rules)) == sorted(default_run)
    left_out = {(rule, impact) for rule, impact in ran if impact and rule not in rules}
    assert {"empty-heading", "meta-viewport", "scope-attr-valid"} <= {r for r, _ in left_out}
    assert {impact for _, impact in left_out} <= {"minor", "moderate"}
    page.context.close()
