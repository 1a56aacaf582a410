"""Reliability report and export benchmark: 4 judges × 1,000 conversations × 10 responses × 7.

    .venv/bin/python -m benchmarks.report_bench [--runs 5] [--conversations 1000] [--db NAME]

Builds a fresh database (mentalbench_bench_report, dropped and recreated), synthesizes a study
like MentalAlign-70k with the two judges that are not shipped added (claude-3.7-sonnet, gpt-4o,
gemini-2.5-flash, o4-mini, each with the paper's self-exclusion) and two clinicians (every
conversation rated once, 10 % twice), ≈ 357k scores, then reports the median of --runs runs of:

- the reliability report from Postgres: selector (one query) + reliability_table, 1,000 resamples;
- the whole dashboard bundle from Postgres, uncached (every table, coverage, notes);
- the in-memory statistics alone (reliability_table on the loaded frame);
- baseline: a per-resample loop calling pingouin.intraclass_corr, timed on a few hundred
  resamples of one judge × attribute and extrapolated to 28 pairs × 1,000 (stated as such);
- `manage.py export_ratings` of every score as a subprocess, with its system checks as a user
  types it (wall time and peak RSS), beside its floor: psql `\\copy` of the same SELECT.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import harness

STUDY = "Report benchmark"
JUDGES = ("claude-3.7-sonnet", "gpt-4o", "gemini-2.5-flash", "o4-mini")
RESPONDERS = (
    "original", "claude", "gemini", "gpt4o", "gpt4omini", "llama_3", "qwen_2", "qwen_3",
    "ds_llama", "ds_qwen",
)  # fmt: skip


def synthesize(n_conversations: int) -> int:
    """Bulk-insert the study; returns the number of scores."""
    from django.db import transaction

    from annotation.models import Conversation, Rater, Rating, Response, Score
    from annotation.services import (
        clinician_rater_get_or_create,
        judge_rater_get_or_create,
        responders_ensure,
        study_get_or_create,
    )

    rng = np.random.default_rng(0)
    with transaction.atomic():
        study, _ = study_get_or_create(name=STUDY)
        attributes = list(study.rubric.attributes.order_by("position"))
        responders = responders_ensure(keys=set(RESPONDERS))
        quality = dict(zip(RESPONDERS, rng.uniform(3.0, 4.8, len(RESPONDERS)), strict=True))
        conversations = Conversation.objects.bulk_create(
            Conversation(
                study=study,
                external_id=str(i),
                context=f"context {i}",
                conditions=["anxiety"] if i % 3 else ["depression"],
                source="synthetic",
            )
            for i in range(n_conversations)
        )
        # No response texts: ROUGE-L (a Python loop per response) is not part of this figure.
        responses = Response.objects.bulk_create(
            (Response(conversation=c, responder=responders[k]) for c in conversations
             for k in RESPONDERS),
            batch_size=5000,
        )  # fmt: skip
        judges = [judge_rater_get_or_create(name=name) for name in JUDGES]
        clinicians = [clinician_rater_get_or_create(name=f"clinician {i}") for i in (1, 2)]
        plan: list[tuple[Rater, Response, float, float]] = []
        for i, response in enumerate(responses):
            q = quality[response.responder.key]
            conv = i // len(RESPONDERS)
            plan.append((clinicians[conv % 2], response, q, 0.9))
            if conv % 10 == 0:  # 10 % of conversations get a second clinician
                plan.append((clinicians[(conv + 1) % 2], response, q, 0.9))
            for j, judge in enumerate(judges):
                plan.append((judge, response, q + 0.2 * (j + 1), 0.7))
        ratings = Rating.objects.bulk_create(
            (
                Rating(rater=r, response=resp, status="complete", source="import")
                for r, resp, _, _ in plan
            ),
            batch_size=5000,
        )
        means = np.array([m for _, _, m, _ in plan])[:, None]
        noise = np.array([s for _, _, _, s in plan])[:, None]
        values = np.clip(np.rint(means + rng.normal(0, 1, (len(plan), 7)) * noise), 1, 5)
        Score.objects.bulk_create(
            (
                Score(rating=rating, attribute=attributes[a], value=int(values[i, a]))
                for i, rating in enumerate(ratings)
                for a in range(len(attributes))
            ),
            batch_size=10_000,
        )
    return len(ratings) * len(attributes)


def pingouin_baseline(df, exclusions, attributes, n_resamples: int) -> float:
    """Seconds for 28 pairs × 1,000 resamples, extrapolated from `n_resamples` of one pair."""
    import pandas as pd
    import pingouin as pg

    from analysis import reports

    cells = reports.paired_cells(df, attributes=attributes, exclusions=exclusions)
    sel = (cells.judge == 0) & (cells.attribute == 0)
    n_r = len(cells.responders)
    cnt = np.bincount(cells.responder[sel], minlength=n_r)
    with np.errstate(invalid="ignore", divide="ignore"):  # the excluded responder has no cells
        human = np.bincount(cells.responder[sel], weights=cells.human[sel], minlength=n_r) / cnt
        judge = np.bincount(cells.responder[sel], weights=cells.score[sel], minlength=n_r) / cnt
    have = cnt > 0
    matrix = np.column_stack([human[have], judge[have]])
    n = len(matrix)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(n_resamples):
        idx = rng.integers(0, n, n)
        boot = matrix[idx]
        long = pd.DataFrame(
            {
                "target": np.repeat(np.arange(n), 2),
                "rater": np.tile(["human", "judge"], n),
                "score": boot.ravel(),
            }
        )
        try:
            pg.intraclass_corr(long, targets="target", raters="rater", ratings="score")
        except Exception:  # noqa: BLE001 - a degenerate resample; the loop still pays for it
            pass
    per_resample = (time.perf_counter() - start) / n_resamples
    return per_resample * 1000 * len(cells.judges) * len(attributes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--pingouin-resamples", type=int, default=300)
    parser.add_argument("--keep", action="store_true", help="reuse an existing benchmark db")
    harness.add_database_argument(parser, "mentalbench_bench_report")
    args = parser.parse_args()

    if not args.keep:
        harness.fresh_database(args.db)
    env = harness.database_env(args.db)
    harness.django_setup(**env)
    from analysis import reports, selectors
    from annotation.models import Score, Study
    from benchmarks import export_floor

    if not Study.objects.filter(name=STUDY).exists():
        start = time.perf_counter()
        n_scores = synthesize(args.conversations)
        print(f"synthesized {n_scores} scores in {time.perf_counter() - start:.1f} s")
        # Planner statistics as the importers leave them (analyze_after_commit): without them
        # PostgreSQL plans the export's joins for empty tables. No VACUUM: a user's database
        # right after an import has no vacuumed visibility map either.
        harness.psql(args.db, "ANALYZE")
    study = Study.objects.get(name=STUDY)
    n_scores = Score.objects.filter(rating__response__conversation__study=study).count()
    attributes = selectors.attribute_names(study=study)
    exclusions = selectors.exclusions_for(study=study)

    def report_from_postgres():
        df = selectors.scores_frame(study=study)
        return reports.reliability_table(
            df, attributes=attributes, exclusions=exclusions, n_boot=1000, seed=0
        )

    def bundle_from_postgres():
        return selectors.study_report_build(
            study=study,
            filters=selectors.Filters(),
            params=selectors.ReportParams(n_boot=1000),
            version="bench",
        )

    frame = selectors.scores_frame(study=study)

    def statistics_only():
        return reports.reliability_table(
            frame, attributes=attributes, exclusions=exclusions, n_boot=1000, seed=0
        )

    def selector_only():
        return selectors.scores_frame(study=study)

    results = {
        "selector (one query → DataFrame)": harness.median_of(selector_only, args.runs),
        "reliability report from Postgres, 1,000 resamples": harness.median_of(
            report_from_postgres, args.runs
        ),
        "whole dashboard bundle from Postgres, uncached": harness.median_of(
            bundle_from_postgres, args.runs
        ),
        "in-memory statistics (reliability_table), 1,000 resamples": harness.median_of(
            statistics_only, args.runs
        ),
    }
    table = report_from_postgres()
    baseline = pingouin_baseline(frame, exclusions, attributes, args.pingouin_resamples)
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_floor.measure(
            study_name=STUDY, env=env, out_dir=Path(tmp), runs=args.runs
        )
    print(f"\nstudy: {n_scores} scores, {len(table)} judge × attribute rows, "
          f"n_models {sorted(set(table['n_models']))}")  # fmt: skip
    for name, timing in results.items():
        print(f"{name}: {timing}")
    stats_median = results["in-memory statistics (reliability_table), 1,000 resamples"].median
    print(
        f"pingouin per-resample loop, extrapolated from {args.pingouin_resamples} resamples "
        f"to {len(table)} pairs × 1,000: {baseline:.1f} s "
        f"(ratio {baseline / stats_median:.0f}× the in-memory statistics)"
    )
    print(export_floor.report(exported))


if __name__ == "__main__":
    main()
