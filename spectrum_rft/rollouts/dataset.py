"""Dataset generator and the dataset adapter both evaluation entries use.

    python make_spectrum_dataset.py --n 48 --out data/x.jsonl [--prompt explicit|weak|notepad-vague|notepad-explicit]
        [--memory-mode M] [--preset P] [--reward R] [--no-think/--think] [--epochs K] [--salt S]
        [--format raw|evaluation-row]

A row carries everything the environment needs in ``dataset_info["environment_context"]`` (preset, memory
mode, reward, prompt variant, think flag, salt, and the derived seed), so nothing about an episode depends
on process state. ``--epochs K`` writes K x n rows with distinct ids (``e03-r0017``): K epochs of
never-repeating bands, reproducibly. ``--salt process`` keeps the original experiment's per-process salt
for replication (the salt actually used is reported in each row's metrics).

Two formats: ``raw`` (compact: id, system prompt, environment context) and ``evaluation-row``
(eval-protocol's EvaluationRow JSON, what ``ep create rft`` / ``spectrum-rft launch`` upload).
:func:`dataset_adapter` accepts either.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from spectrum_rft.task.config import MEMORY_MODES, PROMPT_VARIANTS, EnvConfig, default_memory_mode
from spectrum_rft.task.presets import PRESET_NAMES, get_preset
from spectrum_rft.task.rows import row_seed

USER_PROMPT_TEMPLATE = "{observation}"
FIRST_USER_MESSAGE = "Begin monitoring. The first scan follows."

# A row's split marker: ``environment_context["split"] == "heldout"`` marks a held-out evaluation row (fresh bands
# a job scores and never trains on: ``spectrum-rft launch`` writes it, ``spectrum-rft report`` reads it). The env
# ignores keys it does not know, so the row plays as any other.
SPLIT_KEY = "split"
HELDOUT = "heldout"


def is_heldout(environment_context: Any) -> bool:
    """Whether a row's ``environment_context`` marks it as a held-out evaluation row."""
    return isinstance(environment_context, dict) and environment_context.get(SPLIT_KEY) == HELDOUT


# The presets a generated row can play: its seed is hashed from the row id. A preset whose seed is the run
# index of a fixed schedule (bench90) has rows of its own, pinned to the run (``spectrum-rft bench90``).
ROW_PRESETS: tuple[str, ...] = tuple(name for name in PRESET_NAMES if not get_preset(name).seed_is_run_index)


def check_row_preset(preset: str) -> None:
    """Refuse, in one line, a preset that rows with row-hash seeds cannot play (unknown names included)."""
    try:
        p = get_preset(preset)
    except ValueError:
        raise ValueError(f"unknown preset {preset!r}; choose one of {', '.join(ROW_PRESETS)}") from None
    if p.seed_is_run_index:
        raise ValueError(f"preset {preset!r} plays a fixed schedule by run index, which generated rows (seeded from "
                         f"their ids) cannot pin: run it with `spectrum-rft bench90`; rows take "
                         f"{', '.join(ROW_PRESETS)}")


def make_rows(n: int, *, prompt: str = "explicit", memory_mode: str | None = None, preset: str = "default",
              reward: str = "default", think: bool = False, epochs: int = 1, salt: str = "",
              prefix: str = "spectrum") -> list[dict]:
    """Raw rows: ``{"id", "system_prompt", "user_prompt_template", "environment_context"}``. ``preset``: one
    of :data:`ROW_PRESETS` (:func:`check_row_preset`)."""
    check_row_preset(preset)
    cfg = EnvConfig(preset=preset, memory_mode=memory_mode or default_memory_mode(prompt), reward=reward,
                    prompt=prompt, think=think, salt=salt)
    from spectrum_rft.task.instructions import render_system_prompt  # noqa: PLC0415

    system = render_system_prompt(cfg)
    rows = []
    for e in range(epochs):
        for i in range(n):
            row_id = f"{prefix}-e{e:02d}-r{i:04d}" if epochs > 1 else f"{prefix}-r{i:04d}"
            ctx = {**cfg.to_dict(), "row_id": row_id, "epoch": e}
            if salt != "process":
                ctx["seed"] = row_seed(row_id, cfg)
            rows.append({"id": row_id, "system_prompt": system, "user_prompt_template": USER_PROMPT_TEMPLATE,
                         "environment_context": ctx})
    return rows


def to_evaluation_row_dict(raw: dict) -> dict:
    """A raw row as EvaluationRow JSON (system message + an opening user message)."""
    return {
        "messages": [{"role": "system", "content": raw["system_prompt"]},
                     {"role": "user", "content": FIRST_USER_MESSAGE}],
        "input_metadata": {
            "row_id": raw["id"],
            "dataset_info": {"user_prompt_template": raw.get("user_prompt_template", USER_PROMPT_TEMPLATE),
                             "environment_context": raw["environment_context"]},
        },
    }


MAX_ROW_BYTES = 1_000_000  # a row is a system prompt and a config (~4 KB): past this it is not a spectrum row


class DatasetError(ValueError):
    """A dataset that cannot run as it is (one line naming the row or the line, and what to do)."""


def row_identity(row: Any) -> Any:
    """The row id of a raw row (``id``), an EvaluationRow-format row or an ``EvaluationRow``; None if none."""
    if isinstance(row, dict):
        if "id" in row:
            return row["id"]
        meta = row.get("input_metadata")
        return meta.get("row_id") if isinstance(meta, dict) else None
    meta = getattr(row, "input_metadata", None)
    return getattr(meta, "row_id", None)


def _canonical(row: Any) -> str:
    if isinstance(row, dict):
        return json.dumps(row, sort_keys=True, default=str)
    dump = getattr(row, "model_dump_json", None)
    return dump() if callable(dump) else repr(row)


def check_row_ids(rows: list, *, repeats: bool = False) -> None:
    """Refuse (:class:`DatasetError`, one line naming them) row ids that appear more than once: a row's band is
    seeded from its id, so two rows with one id are one band scored twice (under two settings, two scores).
    ``repeats``: the same row given again, unchanged, is allowed (GRPO candidates of one row); two *different*
    rows under one id never are."""
    seen: dict[Any, str] = {}
    dup: list[Any] = []
    for r in rows:
        key, text = row_identity(r), _canonical(r) if repeats else ""
        if key in seen and (not repeats or seen[key] != text) and key not in dup:
            dup.append(key)
        seen.setdefault(key, text)
    if dup:
        shown = ", ".join(repr(k) for k in dup[:5]) + (f" and {len(dup) - 5} more" if len(dup) > 5 else "")
        what = "differing rows share an id" if repeats else "row id(s) appear more than once"
        raise DatasetError(f"{len(dup)} {what} ({shown}): each row needs an id of its own (its band is seeded "
                           "from it)")


def _one_line(e: Exception) -> str:
    """A pydantic validation error (multi-line) as one line: its first problem and where."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            where = ".".join(str(x) for x in first.get("loc", ()))
            return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
        except Exception:  # noqa: BLE001  (fall back to the first line)
            pass
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def dataset_adapter(rows: Iterable[dict]) -> list:
    """Raw rows or EvaluationRow-format rows -> ``EvaluationRow`` objects (row ids preserved). Pure: no
    environment is built here (the privileged oracle rebuilds its row from the call's litellm metadata).
    Before any rollout, a row over :data:`MAX_ROW_BYTES`, a row that is not a spectrum row and two different
    rows under one id are refused with one line (:class:`DatasetError`); one row repeated unchanged (GRPO
    candidates) is not."""
    from eval_protocol.models import EvaluationRow  # noqa: PLC0415

    rows = list(rows)
    out = []
    for i, r in enumerate(rows):
        if isinstance(r, EvaluationRow):
            out.append(r)
            continue
        if not isinstance(r, dict):
            raise DatasetError(f"dataset row {i}: expected an object, got {type(r).__name__}")
        size = len(json.dumps(r, separators=(",", ":")))
        if size > MAX_ROW_BYTES:
            raise DatasetError(f"dataset row {i} ({row_identity(r)!r}) is {size:,} bytes, over the {MAX_ROW_BYTES:,}-byte "
                               "limit of a row (a spectrum row is a prompt and a config: a few KB)")
        try:
            if "messages" in r and "input_metadata" in r:
                out.append(EvaluationRow.model_validate(r))
            elif "id" in r and "environment_context" in r:
                out.append(EvaluationRow.model_validate(to_evaluation_row_dict(r)))
            else:
                raise DatasetError(f"dataset row {i}: neither a raw spectrum row (id, environment_context) nor an "
                                   "EvaluationRow (messages, input_metadata)")
        except DatasetError:
            raise
        except (ValueError, TypeError) as e:
            raise DatasetError(f"dataset row {i} ({row_identity(r)!r}) is not a valid row: {_one_line(e)}") from None
    check_row_ids(rows, repeats=True)  # the rows as given (an EvaluationRow object: as itself)
    return out


def read_dataset(path: str | Path) -> tuple[list[dict], list[str]]:
    """The rows of a JSONL dataset file (raw or EvaluationRow format) and the lines that were skipped, each
    as one line naming the file and line number (a line that is not a JSON object). A line over
    :data:`MAX_ROW_BYTES` or a row id given twice refuses the whole file (:class:`DatasetError`): no rollout
    runs on a dataset that is not what its author meant."""
    path = Path(path)
    rows: list[dict] = []
    skipped: list[str] = []
    try:
        f = path.open("rb")
    except OSError as e:
        raise DatasetError(f"cannot read {path}: {e.strerror or e}") from None
    with f:
        for n, raw in enumerate(f, start=1):
            if len(raw) > MAX_ROW_BYTES:
                raise DatasetError(f"{path}:{n}: a line of {len(raw):,} bytes, over the {MAX_ROW_BYTES:,}-byte limit of "
                                   "a row; nothing was run")
            text = raw.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            try:
                row = json.loads(text)
            except ValueError as e:
                skipped.append(f"{path}:{n}: not JSON ({getattr(e, 'msg', e)} at column {getattr(e, 'colno', '?')}); "
                               "line skipped")
                continue
            if not isinstance(row, dict) or row_identity(row) is None:
                skipped.append(f"{path}:{n}: not a spectrum row (an object with id, or input_metadata.row_id); "
                               "line skipped")
                continue
            rows.append(row)
    check_row_ids(rows)
    return rows, skipped


def write_jsonl(rows: Iterable[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    return path


def main(argv: list[str] | None = None, prog: str = "spectrum-rft dataset") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=48, help="rows per epoch")
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompt", choices=PROMPT_VARIANTS, default="explicit")
    ap.add_argument("--memory-mode", choices=MEMORY_MODES, default=None,
                    help="default: notepad for notepad prompts, else scaffold")
    ap.add_argument("--preset", default="default", help=f"one of {', '.join(ROW_PRESETS)} (bench90: spectrum-rft bench90)")
    ap.add_argument("--reward", default="default")
    ap.add_argument("--think", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--salt", default="", help="band salt; 'process' = fresh per process (replication only)")
    ap.add_argument("--prefix", default="spectrum", help="row id prefix")
    ap.add_argument("--format", choices=("raw", "evaluation-row"), default="raw")
    a = ap.parse_args(argv)
    if a.n < 1 or a.epochs < 1:
        ap.error("--n and --epochs must be >= 1")
    try:
        rows = make_rows(a.n, prompt=a.prompt, memory_mode=a.memory_mode, preset=a.preset, reward=a.reward,
                         think=a.think, epochs=a.epochs, salt=a.salt, prefix=a.prefix)
    except ValueError as e:
        ap.error(str(e))
    if a.format == "evaluation-row":
        rows = [to_evaluation_row_dict(r) for r in rows]
    if Path(a.out).is_dir():
        ap.error(f"--out {a.out} is a folder; give a file name (e.g. {Path(a.out) / 'rows.jsonl'})")
    try:
        path = write_jsonl(rows, a.out)
    except OSError as e:
        print(f"{ap.prog}: cannot write --out {a.out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"wrote {len(rows)} rows to {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
