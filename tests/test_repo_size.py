"""The results policy (docs/ARCHITECTURE.md, "What results/ keeps"): a record keeps what its result needs (logs,
rollouts, eval rows, small float16 adapters), never a model, a checkpoint with optimiser states or a file a
clone cannot afford. Measured on the tracked files (``git ls-files``), as a clone gets them."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE_MB = 25  # the largest file a clone may carry (today's largest: a 19.6 MB float32 SFT adapter)
# results/ as a whole: 160 MB at evidence v4's start (172 MB with its first session's records), plus that
# experiment's 30 MB budget (issue 40)
RESULTS_BUDGET_MB = 190


def tracked_sizes() -> dict[str, int]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = [f for f in out.decode().split("\0") if f]
    return {f: (ROOT / f).stat().st_size for f in files if (ROOT / f).is_file()}


def over(sizes: dict[str, int], limit_mb: float) -> list[str]:
    return sorted(f"{f}: {s / 1e6:.1f} MB" for f, s in sizes.items() if s > limit_mb * 1e6)


def test_no_tracked_file_over_the_limit():
    sizes = tracked_sizes()
    assert len(sizes) > 100 and "README.md" in sizes
    assert not over(sizes, MAX_FILE_MB), f"files over {MAX_FILE_MB} MB: {over(sizes, MAX_FILE_MB)}"


def test_results_stay_within_their_budget():
    results = sum(s for f, s in tracked_sizes().items() if f.startswith("results/"))
    assert results <= RESULTS_BUDGET_MB * 1e6, (f"results/ holds {results / 1e6:.1f} MB, over its {RESULTS_BUDGET_MB} MB "
                                                "budget: keep records and float16 adapters only")


def test_the_checks_see_a_large_file():
    assert over({"results/x/model.safetensors": 30_000_000, "a.py": 10}, MAX_FILE_MB) == [
        "results/x/model.safetensors: 30.0 MB"]
