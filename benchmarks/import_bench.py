"""Import benchmark: 10,000 synthetic conversations × 10 responses, and the MentalAlign workbooks.

    .venv/bin/python -m benchmarks.import_bench [--runs 3] [--conversations 10000] [--db NAME]

Each measurement runs `manage.py import_*` as a subprocess on a freshly migrated database
(mentalbench_bench_import or --db, dropped and recreated per run) and reports the median of
--runs runs. Each command runs as a user types it (with Django's system checks). Beside each
figure, its floor measured in the same run:

- 10k × 10 conversations: a COPY-and-reshape floor — psql `\\copy`s the CSV into a staging table
  and reshapes it with two INSERT … SELECT into the conversation and response tables (constraints
  in place, one transaction), with no Python at all;
- MentalAlign workbooks: openpyxl's read-only parsing of the three workbooks alone.

A naive importer creating one row per ORM call (on 500 conversations, extrapolated linearly) is
kept as the old baseline. The MentalAlign workbooks are looked for in
$MENTALBENCH_SHARED/data/mentalalign70k (or --shared); the script stops with an error when
they are missing rather than skip them (--no-mentalalign to leave them out on purpose).
"""

import argparse
import random
import statistics
import subprocess
import sys
from pathlib import Path

from annotation.csvsafe import safe_writer
from benchmarks import harness
from benchmarks.harness import ROOT

MODELS = [
    "claude",
    "gemini",
    "gpt4o",
    "gpt4omini",
    "llama_3",
    "qwen_2",
    "qwen_3",
    "ds_llama",
    "ds_qwen",
]
WORDS = (
    "I feel anxious and tired lately and my sleep is poor so work is hard to manage "
    "talk with someone you trust consider a counsellor breathing exercises may help"
).split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def write_csv(path: Path, n: int) -> None:
    rng = random.Random(0)
    with path.open("w", newline="") as handle:
        writer = safe_writer(handle)
        writer.writerow(["id", "context", "response", *MODELS, "condition_1", "condition_2"])
        for i in range(n):
            # ~100-word contexts and responses, close to MentalBench-100k's median lengths
            writer.writerow(
                [
                    f"c{i}",
                    sentence(rng, 100),
                    sentence(rng, 100),
                    *(sentence(rng, 120) for _ in MODELS),
                    "anxiety",
                    "sleep",
                ]
            )


def manage(db: str, *args: str) -> float:
    return harness.seconds(
        lambda: subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            check=True,
            env=harness.database_env(db),
            stdout=subprocess.DEVNULL,
        )
    )


FLOOR_SQL = """
\\set ON_ERROR_STOP on
BEGIN;
CREATE TEMPORARY TABLE raw (id text, context text, response text, {models} text,
                            condition_1 text, condition_2 text) ON COMMIT DROP;
\\copy raw FROM '{path}' WITH (FORMAT csv, HEADER true)
INSERT INTO annotation_study (name, kind, description, stale_after_days, created_at, rubric_id,
                              label_scheme, rationale_required, rationale_min_length)
SELECT 'floor', kind, '', stale_after_days, now(), rubric_id, label_scheme, rationale_required,
       rationale_min_length
FROM annotation_study WHERE name = 'bench';
INSERT INTO annotation_conversation (external_id, context, conditions, source, created_at, study_id,
                                     practice)
SELECT id, context, jsonb_build_array(condition_1, condition_2), '', now(),
       (SELECT id FROM annotation_study WHERE name = 'floor'), false
FROM raw;
INSERT INTO annotation_response (text, truncated, metadata, created_at, conversation_id,
                                 responder_id)
SELECT cell.text, false, '{{}}', now(), c.id, r.id
FROM raw
JOIN annotation_conversation c
  ON c.external_id = raw.id AND c.study_id = (SELECT id FROM annotation_study WHERE name = 'floor')
CROSS JOIN LATERAL (VALUES ('original', raw.response), {pairs}) AS cell(key, text)
JOIN annotation_responder r ON r.key = cell.key;
COMMIT;
"""


def floor_seconds(db: str, path: Path) -> float:
    """The COPY-and-reshape floor, run after an import of the same file into the same
    database (the responders exist; a second study receives the rows)."""
    script = FLOOR_SQL.format(
        models=" text, ".join(MODELS),
        path=path.resolve(),
        pairs=", ".join(f"('{m}', raw.{m})" for m in MODELS),
    )
    return harness.seconds(
        lambda: subprocess.run(
            ["psql", "-q", "-X", harness.database_url(db)],
            input=script,
            text=True,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    )


OPENPYXL = """
import sys, time, openpyxl
start = time.perf_counter()
for path in sys.argv[1:]:
    book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    for sheet in book.worksheets:
        sheet.reset_dimensions()
        for row in sheet.iter_rows(values_only=True):
            pass
print(time.perf_counter() - start)
"""


def openpyxl_seconds(paths: list[Path]) -> float:
    """openpyxl's read-only parsing of the workbooks alone, in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", OPENPYXL, *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


NAIVE = """
import csv, sys, time
from annotation.models import Conversation, Response
from annotation.services import responders_ensure, study_get_or_create
study, _ = study_get_or_create(name="naive")
responders = responders_ensure(keys={"original", *sys.argv[2].split(",")})
rows = list(csv.DictReader(open(sys.argv[1])))[: int(sys.argv[3])]
start = time.perf_counter()
for row in rows:
    conversation = Conversation.objects.create(study=study, external_id=row["id"],
                                               context=row["context"])
    Response.objects.create(conversation=conversation, responder=responders["original"],
                            text=row["response"])
    for key in sys.argv[2].split(","):
        Response.objects.create(conversation=conversation, responder=responders[key], text=row[key])
print(time.perf_counter() - start)
"""


def naive_seconds(db: str, path: Path, n: int) -> float:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django,os;os.environ.setdefault('DJANGO_SETTINGS_MODULE',"
            "'mentalbench.settings');django.setup();exec(open(0).read())",
            str(path),
            ",".join(MODELS),
            str(n),
        ],
        input=NAIVE,
        text=True,
        capture_output=True,
        check=True,
        env=harness.database_env(db),
        cwd=ROOT,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--shared", type=Path, default=harness.mentalalign_data(), help="the workbooks' folder"
    )
    parser.add_argument("--no-mentalalign", action="store_true", help="leave the workbooks out")
    parser.add_argument(
        "--naive-conversations", type=int, default=500,
        help="conversations the naive baseline imports (its time is extrapolated)",
    )  # fmt: skip
    harness.add_database_argument(parser, "mentalbench_bench_import")
    args = parser.parse_args()
    db = args.db
    workbooks = [
        args.shared / name
        for name in ("Human_judge.xlsx", "claude_llm_judge.xlsx", "gpt-4o_llm_judge.xlsx")
    ]
    missing = [str(w) for w in workbooks if not w.is_file()]
    if missing and not args.no_mentalalign:
        parser.error(
            f"MentalAlign workbooks not found: {', '.join(missing)} (give --shared DIR, or "
            "--no-mentalalign to leave them out)"
        )
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    data = out / f"synthetic_{args.conversations}.csv"
    if not data.exists():
        write_csv(data, args.conversations)
    print(
        f"{data.name}: {data.stat().st_size / 1e6:.1f} MB, {args.conversations} conversations "
        f"× 10 responses"
    )

    first, again, naive, floor = [], [], [], []
    for _ in range(args.runs):
        harness.fresh_database(db)
        first.append(manage(db, "import_conversations", "--study", "bench", str(data)))
        again.append(manage(db, "import_conversations", "--study", "bench", str(data)))
        floor.append(floor_seconds(db, data))
        naive_n = min(args.naive_conversations, args.conversations)
        naive.append(naive_seconds(db, data, naive_n) * args.conversations / naive_n)
    report = {
        "import (fresh database)": first,
        "re-import (nothing new)": again,
        "floor: psql COPY into staging + INSERT … SELECT reshape": floor,
        f"naive per-row ORM baseline (extrapolated from {naive_n})": naive,
    }
    if not args.no_mentalalign:
        mentalalign, parsing = [], []
        for _ in range(args.runs):
            parsing.append(openpyxl_seconds(workbooks))
            harness.fresh_database(db)
            mentalalign.append(
                manage(
                    db,
                    "import_mentalalign",
                    "--study",
                    "MentalAlign-70k",
                    "--human",
                    str(args.shared / "Human_judge.xlsx"),
                    "--judge",
                    f"claude-3.7-sonnet={args.shared / 'claude_llm_judge.xlsx'}",
                    "--judge",
                    f"gpt-4o={args.shared / 'gpt-4o_llm_judge.xlsx'}",
                )
            )
        report["MentalAlign-70k: 3 workbooks, 30,000 cells"] = mentalalign
        report["floor: openpyxl read-only parsing of the 3 workbooks"] = parsing
    for name, values in report.items():
        print(
            f"{name:55s} median {statistics.median(values):7.2f} s  runs "
            + " ".join(f"{v:.2f}" for v in values)
        )
    median = {name: statistics.median(values) for name, values in report.items()}
    print(
        f"import / COPY-and-reshape floor: "
        f"{median['import (fresh database)'] / statistics.median(floor):.2f}×; "
        f"naive per-row baseline / import: "
        f"{statistics.median(naive) / median['import (fresh database)']:.1f}×"
    )
    if not args.no_mentalalign:
        print(
            "MentalAlign import / openpyxl parsing floor: "
            f"{statistics.median(mentalalign) / statistics.median(parsing):.1f}×"
        )
    print(harness.load())
    harness.drop_database(db)


if __name__ == "__main__":
    main()
