"""Every CSV the project writes goes through one writer, annotation.csvsafe, whose cells are
safe to open in a spreadsheet. This test reads the code itself: a new csv.writer, DictWriter or
DataFrame.to_csv anywhere else fails it, naming the file and line."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THE_WRITER = "annotation/csvsafe.py"
# PostgreSQL writes this export's CSV itself (COPY … FORMAT csv); its SQL applies csvsafe's rule,
# and tests/analysis/test_copy_export.py holds it byte for byte to the csvsafe-written export.
COPY_EXPORT = {"analysis/copy_export.py", "benchmarks/export_floor.py"}

WRITERS = re.compile(
    r"\bcsv\s*\.\s*(writer|DictWriter)\s*\("
    r"|\.to_csv\s*\("
    r"|\bfrom\s+csv\s+import\s+[^\n]*\b(writer|DictWriter)\b"
)
# A CSV response built by hand would skip the one Content-Disposition and content type.
CSV_RESPONSE = re.compile(r"""content_type\s*=\s*["']text/csv""")
COPY_CSV = re.compile(r"\bTO\b[^\n]*\bFORMAT\s+csv", re.IGNORECASE)  # writing, not COPY FROM


def project_python_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # Tests write their own input files; everything else is what the project writes.
    return [p for p in listed if not p.startswith("tests/") and (ROOT / p).is_file()]


def offenders(pattern: re.Pattern[str], allowed: set[str]) -> list[str]:
    found = []
    for path in project_python_files():
        if path in allowed:
            continue
        for number, line in enumerate((ROOT / path).read_text().splitlines(), start=1):
            if pattern.search(line):
                found.append(f"{path}:{number}: {line.strip()}")
    return found


def test_no_csv_is_written_outside_the_one_writer():
    assert offenders(WRITERS, {THE_WRITER}) == []


def test_csv_responses_come_from_the_one_writer():
    assert offenders(CSV_RESPONSE, {THE_WRITER}) == []


def test_only_the_copy_export_has_postgres_write_csv():
    assert offenders(COPY_CSV, COPY_EXPORT) == []


def test_the_scan_finds_what_it_looks_for():
    # The patterns match the writers they are meant to catch (a scan that never matches passes).
    for line in (
        "w = csv.writer(f)",
        "csv.DictWriter(f, fieldnames=x)",
        "df.to_csv(index=False)",
        "from csv import writer",
    ):
        assert WRITERS.search(line), line
    assert WRITERS.search("csv.reader(f)") is None
    assert CSV_RESPONSE.search('HttpResponse(content_type="text/csv")')
    assert offenders(WRITERS, set()) != []  # csvsafe itself is found when not allowed
