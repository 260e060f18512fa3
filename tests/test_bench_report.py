"""`make bench`'s last step: every figure against its target, and a hard miss beyond the
run's own noise fails it (bench/report.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def report(tmp_path: Path, *figures: dict) -> subprocess.CompletedProcess[str]:
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps({"kind": "figure", **f}) + "\n" for f in figures))
    env = {**os.environ, "BENCH_RESULTS": str(results)}
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "report.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


TEXT = {"name": "text ratio", "unit": "x", "target": 1.03, "hard": True}


def test_a_hard_miss_beyond_the_noise_fails_the_run(tmp_path):
    done = report(tmp_path, {**TEXT, "value": 1.09, "noise": 1.05})
    assert done.returncode == 1
    assert "| text ratio | 1.09 x | ≤ 1.03 x | MISS |" in done.stdout


def test_a_miss_within_the_noise_passes_and_says_so(tmp_path):
    done = report(tmp_path, {**TEXT, "value": 1.05, "noise": 1.01})
    assert done.returncode == 0
    assert "pass (within noise)" in done.stdout


def test_a_soft_miss_is_printed_but_does_not_fail(tmp_path):
    soft = {"name": "list", "unit": "ms", "target": 300.0, "value": 450.0}
    done = report(tmp_path, soft, {**TEXT, "value": 1.01})
    assert done.returncode == 0
    assert "| list | 450 ms | ≤ 300 ms | MISS |" in done.stdout
