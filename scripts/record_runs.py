"""Copy the record of training runs (no weights) into the repository: results/<name>/<run>/.

    python scripts/record_runs.py results/memory-evidence runs/evidence/sft1 runs/evidence/grpo/*

Copies config.json, code_revision.json, summary.json, metrics.jsonl, rollouts.jsonl of each run directory,
and for GSM8K card runs eval.jsonl, evaluator.json, items.json and the eval/ predictions (adapter/, model/
and checkpoints/ stay out: hundreds of MB), refusing a record that names the home folder, the temp folder
or the folder holding the checkout, so nothing machine-specific is committed.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

FILES = ("config.json", "code_revision.json", "summary.json", "metrics.jsonl", "rollouts.jsonl",
         "eval.jsonl", "evaluator.json", "items.json")  # the last three: GSM8K card runs (with eval/*.jsonl)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    dest = Path(argv[0])
    for run in map(Path, argv[1:]):
        out = dest / run.name
        out.mkdir(parents=True, exist_ok=True)
        names = [*FILES, *(f"eval/{f.name}" for f in sorted((run / "eval").glob("*.jsonl")))]
        if (run / "eval").is_dir():
            (out / "eval").mkdir(exist_ok=True)
        for name in names:
            src = run / name
            if not src.is_file():
                continue
            text = src.read_text()
            # the home folder, the temp folder and the folder holding this checkout: machine-specific
            for bad in (str(Path.home()), tempfile.gettempdir(), str(Path.cwd().resolve().parent)):
                if len(bad) > 1 and bad + "/" in text:
                    print(f"{src}: names a machine path ({bad}...); fix the record first", file=sys.stderr)
                    return 1
            shutil.copyfile(src, out / name)
        print(f"{run} -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
