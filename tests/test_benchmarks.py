"""Every benchmark script still starts: its imports resolve and its options parse (--help).

The benchmarks are run by hand (their figures are in docs/benchmarks.md); this only keeps a
move elsewhere in the code from breaking one unnoticed. It asserts no time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(
    path.stem
    for path in (ROOT / "benchmarks").glob("*.py")
    if path.stem not in {"__init__", "harness", "export_floor"}  # modules, not scripts
)


@pytest.mark.parametrize("script", SCRIPTS)
def test_benchmark_script_starts(script):
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{script}", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:")
