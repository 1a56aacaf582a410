"""Import benchmark: 10,000 synthetic conversations × 10 responses, and the MentalAlign workbooks.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m benchmarks.import_bench

Each measurement runs `manage.py import_*` as a subprocess on a freshly migrated database
(mentalbench_bench_import, dropped and recreated per run) and reports the median of --runs runs.
The baseline, measured in the same run, is a naive importer that creates one row per ORM call
(on 500 conversations, extrapolated linearly), so the figure is a ratio that survives a noisy
shared machine.
"""

import argparse
import csv
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.databases import database_env, database_recreate

ROOT = Path(__file__).resolve().parents[1]
DB = "mentalbench_bench_import"
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
        writer = csv.writer(handle)
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


def env() -> dict:
    return database_env(DB)


def fresh_db() -> None:
    database_recreate(DB)


def manage(*args: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        check=True,
        env=env(),
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


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


def naive_seconds(path: Path, n: int) -> float:
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
        env=env(),
        cwd=ROOT,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--shared", type=Path, default=ROOT.parent / "shared" / "data" / "mentalalign70k"
    )
    args = parser.parse_args()
    out = ROOT / "benchmarks" / "out"
    out.mkdir(exist_ok=True)
    data = out / f"synthetic_{args.conversations}.csv"
    if not data.exists():
        write_csv(data, args.conversations)
    print(
        f"{data.name}: {data.stat().st_size / 1e6:.1f} MB, {args.conversations} conversations "
        f"× 10 responses"
    )

    first, again, naive = [], [], []
    for _ in range(args.runs):
        fresh_db()
        first.append(manage("import_conversations", "--study", "bench", str(data)))
        again.append(manage("import_conversations", "--study", "bench", str(data)))
        naive_n = 500
        naive.append(naive_seconds(data, naive_n) * args.conversations / naive_n)
    report = {
        "import (fresh database)": first,
        "re-import (nothing new)": again,
        "naive per-row ORM baseline (extrapolated from 500)": naive,
    }
    if (args.shared / "Human_judge.xlsx").exists():
        mentalalign = []
        for _ in range(args.runs):
            fresh_db()
            mentalalign.append(
                manage(
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
    for name, values in report.items():
        print(
            f"{name:55s} median {statistics.median(values):7.2f} s  runs "
            + " ".join(f"{v:.2f}" for v in values)
        )
    ratio = statistics.median(naive) / statistics.median(first)
    print(f"bulk import is {ratio:.1f}× faster than the naive per-row baseline")
    subprocess.run(
        [
            "psql",
            "-q",
            "-h",
            "127.0.0.1",
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            f"DROP DATABASE IF EXISTS {DB}",
        ],
        check=True,
    )


if __name__ == "__main__":
    main()
