"""Paper scale: a MentalBench-100k-sized study (≈ 2.9 million scores) from PostgreSQL.

    .venv/bin/python -m benchmarks.paper_scale [--runs 3] [--keep] [--no-export] [--db NAME]
        [--conversations 10000]

Builds (or with --keep reuses) the database mentalbench_bench_paper with one study of
10,000 conversations × 10 responses, rated on 7 attributes by 4 judges (claude-3.7-sonnet,
gpt-4o, gemini-2.5-flash, o4-mini, with the paper's self-exclusions) and by two clinicians on
10 % of the conversations (1,000, each rated by both): 2,800,000 judge scores + 140,000
clinician scores. The rows are made in SQL from the conversations and responses (themselves
loaded through the importers' COPY path), so building takes about a minute, not an hour.

Then, each the median of --runs runs, beside its floor or target:

- the reliability report from PostgreSQL (selector + 28 judge × attribute pairs, 1,000
  resamples), uncached; and the selector's read alone (its floor: the rows must be read);
- the whole dashboard bundle, uncached (target < 3 s);
- the judge-assisted report for all four judges (means, differences, ranking, planner), from
  PostgreSQL (target < 1 s), and its in-memory part alone;
- `manage.py export_ratings` (with its system checks) beside psql `\\copy` of the same SELECT
  (target ≤ 2×, peak RSS < 150 MB).

Every figure is printed with the machine's load average.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks import harness

DB = "mentalbench_bench_paper"
STUDY = "Paper scale"
JUDGES = ("claude-3.7-sonnet", "gpt-4o", "gemini-2.5-flash", "o4-mini")
RESPONDERS = (
    "original", "claude", "gemini", "gpt4o", "gpt4omini", "llama_3", "qwen_2", "qwen_3",
    "ds_llama", "ds_qwen",
)  # fmt: skip
CONVERSATIONS = 10_000
CLINICIAN_SHARE = 10  # every 10th conversation


# Scores: a responder's quality (3.0–4.8, fixed per responder) plus the rater's offset and
# noise, rounded and clipped to 1–5. setseed makes the study the same on every build.
RATINGS_SQL = """
SELECT setseed(0.17);
INSERT INTO annotation_rating (rater_id, response_id, run_id, repeat, assignment_id, status,
    source, rationale, overall, raw_output, error, rationale_edited_ms, created_at, updated_at)
SELECT rt.id, rp.id, NULL, 0, NULL, 'complete', 'import', '', NULL, '', '', NULL, now(), now()
FROM annotation_response rp
JOIN annotation_conversation c ON c.id = rp.conversation_id AND c.study_id = {study}
JOIN annotation_rater rt ON rt.id = ANY(ARRAY[{judges}]::bigint[])
   OR (rt.id = ANY(ARRAY[{clinicians}]::bigint[]) AND c.id % {share} = 0);
INSERT INTO annotation_score (rating_id, attribute_id, value, edited_ms)
SELECT ra.id, a.id,
       least(5, greatest(1, round(
           3.0 + 1.8 * ((rp.responder_id * 7919) % 100) / 100.0
           + CASE WHEN rt.kind = 'judge' THEN 0.2 * (rt.id % 4) ELSE 0 END
           + (random() + random() + random() - 1.5) * 1.2))),
       NULL
FROM annotation_rating ra
JOIN annotation_response rp ON rp.id = ra.response_id
JOIN annotation_conversation c ON c.id = rp.conversation_id AND c.study_id = {study}
JOIN annotation_rater rt ON rt.id = ra.rater_id
CROSS JOIN annotation_attribute a
WHERE a.rubric_id = {rubric};
"""


def synthesize(*, db: str, conversations: int = CONVERSATIONS) -> int:
    """Build the study in database `db` (the one Django is set up on); returns its scores."""
    from django.db import transaction

    from annotation.importers.copy_load import bulk_insert_values
    from annotation.models import Conversation, Response, Score
    from annotation.services import (
        clinician_rater_get_or_create,
        judge_rater_get_or_create,
        responders_ensure,
        study_get_or_create,
    )

    with transaction.atomic():
        study, _ = study_get_or_create(name=STUDY)
        responders = responders_ensure(keys=set(RESPONDERS))
        conversation_ids = bulk_insert_values(
            Conversation,
            ("study_id", "external_id", "context", "conditions", "source"),
            (
                (study.pk, f"c{i}", f"context {i}", '["anxiety"]' if i % 3 else '["depression"]',
                 "synthetic")
                for i in range(conversations)
            ),
        )  # fmt: skip
        # No response texts: ROUGE-L (a loop over texts) is not part of these figures.
        bulk_insert_values(
            Response,
            ("conversation_id", "responder_id", "text"),
            ((c, responders[k].pk, "") for c in conversation_ids for k in RESPONDERS),
        )
        judges = [judge_rater_get_or_create(name=name).pk for name in JUDGES]
        clinicians = [clinician_rater_get_or_create(name=f"clinician {i}").pk for i in (1, 2)]
    harness.psql(
        db,
        RATINGS_SQL.format(
            study=study.pk,
            rubric=study.rubric_id,
            judges=",".join(map(str, judges)),
            clinicians=",".join(map(str, clinicians)),
            share=CLINICIAN_SHARE,
        ),
    )
    # What the importers leave behind (annotation.importers.copy_load.analyze_after_commit):
    # statistics, not a vacuumed visibility map a user's database would not have.
    harness.psql(db, "ANALYZE")
    return Score.objects.filter(rating__response__conversation__study=study).count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="reuse the benchmark database")
    parser.add_argument("--no-export", action="store_true", help="leave the export out")
    parser.add_argument("--conversations", type=int, default=CONVERSATIONS, help="a smaller study")
    harness.add_database_argument(parser, DB)
    args = parser.parse_args()
    if not args.keep:
        harness.fresh_database(args.db)
    env = harness.database_env(args.db)
    harness.django_setup(**env)
    from analysis import reports, selectors
    from analysis.judge_assisted.selectors import (
        judge_assisted_codes,
        judge_assisted_report,
        judge_names,
    )
    from annotation.models import Score, Study
    from benchmarks import export_floor

    if not Study.objects.filter(name=STUDY).exists():
        start = time.perf_counter()
        n = synthesize(db=args.db, conversations=args.conversations)
        print(f"built the study: {n:,} scores in {time.perf_counter() - start:.0f} s")
    study = Study.objects.get(name=STUDY)
    n_scores = Score.objects.filter(rating__response__conversation__study=study).count()
    attributes = selectors.attribute_names(study=study)
    exclusions = selectors.exclusions_for(study=study)
    judges = judge_names(study=study)
    print(f"study {STUDY!r}: {n_scores:,} scores; judges {', '.join(judges)}")

    def line(name: str, timing: harness.Timing, beside: str = "") -> None:
        print(f"{name}: {timing}{beside}; {harness.load()}")

    selector = harness.median_of(lambda: selectors.scores_frame(study=study), args.runs)
    line("selector alone (every score → DataFrame)", selector)
    report = harness.median_of(
        lambda: reports.reliability_table(
            selectors.scores_frame(study=study),
            attributes=attributes,
            exclusions=exclusions,
            n_boot=1000,
            seed=0,
        ),
        args.runs,
    )
    line("reliability report from Postgres, 1,000 resamples", report,
         f" — {report.median / selector.median:.1f}× the selector; target < 3 s")  # fmt: skip
    bundle = harness.median_of(
        lambda: selectors.study_report_build(
            study=study,
            filters=selectors.Filters(),
            params=selectors.ReportParams(n_boot=1000),
            version="bench",
        ),
        args.runs,
    )
    line("whole dashboard bundle from Postgres, uncached", bundle,
         f" — {bundle.median / selector.median:.1f}× the selector; target < 3 s")  # fmt: skip
    assisted = harness.median_of(
        lambda: judge_assisted_report(study=study, judges=judges), args.runs
    )
    codes = judge_assisted_codes(study=study, judges=judges)
    from analysis.judge_assisted import estimator

    def in_memory():
        arrays = estimator.cell_arrays(
            codes, judges=judges, attributes=attributes, exclusions=exclusions
        )
        means = estimator.means_table(arrays, judges=judges, attributes=attributes)
        estimator.ranking_table(
            means, estimator.differences_table(arrays, judges=judges, attributes=attributes)
        )

    line("judge-assisted report, 4 judges, from Postgres", assisted, "; target < 1 s")
    memory = harness.median_of(in_memory, args.runs)
    line("judge-assisted tables in memory (codes already read)", memory)
    if args.no_export:
        return
    with tempfile.TemporaryDirectory() as tmp:
        exported = export_floor.measure(
            study_name=STUDY, env=env, out_dir=Path(tmp), runs=args.runs
        )
    print(export_floor.report(exported))


if __name__ == "__main__":
    main()
