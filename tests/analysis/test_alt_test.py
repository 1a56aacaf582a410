"""The alternative annotator test: the published run reproduced, the statistics against
independent oracles, and the command on a study and on the authors' files."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from django.core.management import CommandError, call_command
from scipy import stats as sps

from analysis import alt_test, reports
from tests.conftest import REFERENCE

ALTTEST = REFERENCE / "alttest"

# The authors' run (their notebook's output, two decimals): dataset → (metric, ε, {llm: (ω, ρ)}).
PUBLISHED: dict[str, tuple[str, float, dict[str, tuple[float, float]]]] = {
    "wax": (
        "accuracy",
        0.10,
        {
            "gemini_flash": (0.38, 0.69),
            "gemini_pro": (0.50, 0.74),
            "gpt-4o": (0.50, 0.73),
            "llama-31": (0.00, 0.57),
            "gpt-4o-mini": (0.00, 0.59),
            "mistral-v03": (0.00, 0.50),
        },
    ),
    "mtbench": (
        "accuracy",
        0.20,
        {
            "gemini_flash": (0.00, 0.72),
            "gemini_pro": (0.00, 0.76),
            "gpt-4o": (0.00, 0.77),
            "llama-31": (0.00, 0.69),
            "gpt-4o-mini": (0.00, 0.74),
            "mistral-v03": (0.00, 0.68),
        },
    ),
    "framing": (
        "accuracy",
        0.15,
        {
            "gemini_flash": (1.00, 0.83),
            "gemini_pro": (1.00, 0.91),
            "gpt-4o": (1.00, 0.92),
            "llama-31": (0.50, 0.80),
            "gpt-4o-mini": (1.00, 0.87),
            "mistral-v03": (0.25, 0.80),
        },
    ),
    "cebab_aspects": (
        "accuracy",
        0.10,
        {
            "gemini_flash": (0.70, 0.91),
            "gemini_pro": (0.90, 0.94),
            "gpt-4o": (0.90, 0.93),
            "llama-31": (0.60, 0.89),
            "gpt-4o-mini": (0.50, 0.90),
            "mistral-v03": (0.10, 0.81),
        },
    ),
    "cebab_stars": (
        "neg_rmse",
        0.10,
        {
            "gemini_flash": (0.60, 0.82),
            "gemini_pro": (0.80, 0.87),
            "gpt-4o": (0.90, 0.90),
            "llama-31": (0.60, 0.85),
            "gpt-4o-mini": (0.90, 0.89),
            "mistral-v03": (0.50, 0.83),
        },
    ),
}


def _alttest_dir(dataset: str) -> Path:
    folder = ALTTEST / dataset
    if not (folder / "human_annotations.json").exists():
        import os

        if os.environ.get("CI"):
            pytest.fail(f"CI must have the shared data, but {folder} is missing")
        pytest.skip(
            f"the alt-test paper's published data is not at {folder} (../shared beside the "
            "checkout, or $MENTALBENCH_SHARED)"
        )
    return folder


@pytest.mark.shared_data
@pytest.mark.parametrize("dataset", list(PUBLISHED))
def test_the_command_reproduces_the_authors_published_run(dataset):
    folder = _alttest_dir(dataset)
    metric, epsilon, published = PUBLISHED[dataset]
    out = io.StringIO()
    call_command(
        "alt_test",
        "--humans", str(folder / "human_annotations.json"),
        "--llm", str(folder / "llm_annotations.json"),
        "--metric", metric,
        "--epsilon", str(epsilon),
        "--format", "csv",
        stdout=out,
    )  # fmt: skip
    table = pd.read_csv(io.StringIO(out.getvalue())).set_index("llm")
    assert list(table.columns[:2]) == ["winning_rate", "advantage_probability"]
    assert set(table.index) == set(published)
    for llm, (omega, rho) in published.items():
        # The published figures are rounded to two decimals: within 0.005 (+ round-off).
        assert abs(table.loc[llm, "winning_rate"] - omega) <= 0.005 + 1e-9, llm
        assert abs(table.loc[llm, "advantage_probability"] - rho) <= 0.005 + 1e-9, llm
        assert bool(table.loc[llm, "passed"]) == (omega >= 0.5), llm


def _three_raters(n: int = 40, seed: int = 3) -> tuple[dict, dict, dict]:
    """Three humans around a truth on 1–5, a close LLM and a far one."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 6, n)
    humans = {
        f"h{k}": {f"i{i}": int(np.clip(truth[i] + rng.integers(-1, 2), 1, 5)) for i in range(n)}
        for k in range(3)
    }
    close = {f"i{i}": int(truth[i]) for i in range(n)}
    far = {f"i{i}": int(6 - truth[i]) for i in range(n)}
    return humans, close, far


def test_each_human_is_compared_as_the_paper_defines_it():
    """Recomputes one leave-one-out comparison by hand: alignment with the remaining humans,
    ties win for both, a one-sided t-test of d = W^h − W^f against ε."""
    humans, close, _ = _three_raters()
    res = alt_test.alt_test(humans=humans, llm=close, metric="neg_rmse", epsilon=0.2)
    assert res.n_humans == 3 and res.n_instances == 40
    h0 = res.humans[0]
    w_f, w_h = [], []
    for i in humans["h0"]:
        rest = [humans["h1"][i], humans["h2"][i]]
        human = -math.sqrt(np.mean([(humans["h0"][i] - a) ** 2 for a in rest]))
        llm = -math.sqrt(np.mean([(close[i] - a) ** 2 for a in rest]))
        w_f.append(llm >= human)
        w_h.append(human >= llm)
    d = np.array(w_h, float) - np.array(w_f, float)
    assert h0.llm_advantage == pytest.approx(np.mean(w_f), abs=1e-12)
    assert h0.p_value == pytest.approx(
        sps.ttest_1samp(d, 0.2, alternative="less").pvalue, abs=1e-12
    )


def test_winning_rate_is_benjamini_yekutieli_over_the_humans():
    from statsmodels.stats.multitest import multipletests

    humans, close, far = _three_raters(n=60, seed=11)
    for llm in (close, far):
        res = alt_test.alt_test(humans=humans, llm=llm, metric="neg_rmse", epsilon=0.1)
        p = [c.p_value for c in res.humans]
        reject = multipletests(p, alpha=0.05, method="fdr_by")[0]
        assert [c.llm_wins for c in res.humans] == list(reject)
        assert res.winning_rate == pytest.approx(reject.mean())
        assert res.passed == (reject.mean() >= 0.5)
    assert alt_test.alt_test(humans=humans, llm=close, metric="neg_rmse").passed is True
    assert alt_test.alt_test(humans=humans, llm=far, metric="neg_rmse").passed is False


def test_accuracy_compares_labels_of_any_kind():
    humans = {
        "a": {i: ("x" if i % 3 else "y") for i in range(30)},
        "b": {i: ("x" if i % 3 else "y") for i in range(30)},
        "c": {i: ("x" if i % 4 else "y") for i in range(30)},
    }
    res = alt_test.alt_test(humans=humans, llm={i: "x" for i in range(30)}, epsilon=0.1)
    assert res.n_humans == 3
    # The LLM never matches a "y": it aligns worse than a or b wherever they agree on "y".
    assert 0.0 < res.advantage_probability < 1.0


def test_too_few_shared_instances_is_not_testable_and_says_why():
    humans, close, _ = _three_raters(n=29)
    res = alt_test.alt_test(humans=humans, llm=close, metric="neg_rmse")
    assert res.passed is None and math.isnan(res.winning_rate)
    assert "30 or more" in (res.reason or "")
    lone = alt_test.alt_test(humans={"a": {i: 1 for i in range(50)}}, llm={i: 1 for i in range(50)})
    assert lone.passed is None and lone.n_instances == 0


def test_bad_parameters_are_refused():
    humans, close, _ = _three_raters()
    with pytest.raises(ValueError, match="metric"):
        alt_test.alt_test(humans=humans, llm=close, metric="f1")
    with pytest.raises(ValueError, match="epsilon"):
        alt_test.alt_test(humans=humans, llm=close, epsilon=1.5)


def test_the_table_per_judge_and_attribute_uses_the_clinicians_as_humans():
    humans, close, far = _three_raters(n=45, seed=5)
    rows = []
    for rater, anns in humans.items():
        for i, v in anns.items():
            rows.append(("conv-" + i, "m1", rater, "clinician", "Safety", float(v)))
    for judge, anns in (("good", close), ("bad", far)):
        for i, v in anns.items():
            rows.append(("conv-" + i, "m1", judge, "judge", "Safety", float(v)))
    df = pd.DataFrame(
        rows, columns=["conversation", "responder", "rater", "rater_kind", "attribute", "score"]
    )
    table = reports.alt_test_table(df, attributes=["Safety"], epsilon=0.2)
    by_judge = table.set_index("judge")
    assert bool(by_judge.loc["good", "passed"]) and not bool(by_judge.loc["bad", "passed"])
    assert (table["n_clinicians"] == 3).all() and (table["n_instances"] == 45).all()
    # A self-preference exclusion removes the responder from that judge's test.
    excluded = reports.alt_test_table(
        df, attributes=["Safety"], exclusions={"good": {"m1"}}, epsilon=0.2
    ).set_index("judge")
    assert excluded.loc["good", "passed"] is None
    assert "not testable" in excluded.loc["good", "reason"]


def _write(tmp_path: Path, name: str, data: object) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give --study"),
        (["--humans", "H"], "go together"),
        (["--humans", "H", "--llm", "L", "--study", "S"], "not both"),
        (["--humans", "H", "--llm", "L", "--epsilon", "2"], "--epsilon"),
        (["--humans", "BAD", "--llm", "L"], "not JSON (line 1"),
        (["--humans", "LIST", "--llm", "L"], "must be an object"),
    ],
)
def test_the_command_refuses_bad_input_in_one_line(tmp_path, args, message):
    humans, close, _ = _three_raters()
    files = {
        "H": _write(tmp_path, "h.json", humans),
        "L": _write(tmp_path, "l.json", {"llm": close}),
        "BAD": _write(tmp_path, "bad.json", "{oops"),
        "LIST": _write(tmp_path, "list.json", {"h0": [1, 2]}),
    }
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        call_command("alt_test", *[files.get(a, a) for a in args], stdout=io.StringIO())


@pytest.fixture
def overlap(db):
    from tests.factories import overlap_study_make

    return overlap_study_make()


def test_the_command_runs_on_a_study_per_judge_and_attribute(overlap):
    study, _, _ = overlap
    out = io.StringIO()
    call_command("alt_test", "--study", study.name, "--format", "csv", stdout=out)
    table = pd.read_csv(io.StringIO(out.getvalue()))
    assert list(table.columns[:4]) == [
        "judge",
        "attribute",
        "winning_rate",
        "advantage_probability",
    ]
    assert len(table) == 2 * 7 and (table["n_clinicians"] == 3).all()
    assert (table["n_instances"] == 120).all()  # 12 conversations × 10 responses, all shared
    by_judge = table.groupby("judge")["passed"].mean()
    assert by_judge["close-judge"] > 0.5 and by_judge["far-judge"] == 0
    with pytest.raises(CommandError, match="no scores by judge 'nope'"):
        call_command("alt_test", "--study", study.name, "--judge", "nope", stdout=io.StringIO())


def test_the_dashboard_and_the_api_carry_the_alt_test(overlap, researcher):
    from django.test import Client
    from knox.models import AuthToken
    from rest_framework.test import APIClient

    study, _, _ = overlap
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=researcher)[1]}")
    rows = api.get(f"/api/studies/{study.pk}/reports/alt_test/").json()["rows"]
    assert len(rows) == 14 and {r["judge"] for r in rows} == {"close-judge", "far-judge"}
    assert all(r["passed"] is False for r in rows if r["judge"] == "far-judge")
    answer = api.get(f"/api/studies/{study.pk}/reports/answer/").json()["rows"]
    far = [r for r in answer if r["judge"] == "far-judge"]
    assert {r["replace"] for r in far} == {"no"}
    assert all("winning rate 0.00" in r["replace_reason"] for r in far)
    # A judge that runs against the clinicians saves nothing (PPI++ clips λ at 0).
    assert {r["assist"] for r in far} == {"not worth it"}
    assert [r["attribute"] for r in answer[:2]] == ["Guidance", "Guidance"]  # attribute-major

    client = Client()
    client.force_login(researcher)
    html = client.get(f"/analysis/studies/{study.pk}/").content.decode()
    first = html.split('id="answer"')[1].split("</section>")[0]
    assert "Can it replace clinicians?" in first and 'class="answer-yes"' in first
    assert html.index('id="answer"') < html.index('id="coverage"')  # the answer comes first
    assert 'id="table-alt_test"' in html
