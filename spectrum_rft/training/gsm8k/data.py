"""GSM8K for the local trainer: items, the prompt, the answer parser and the exact-match scorer.

Everything that decides a GSM8K score lives in this file, so the evaluator identity (see
``spectrum_rft.training.provenance.evaluator_identity``) hashes this file's source together with the prompt template and
the decoding parameters.

Answer rule (the experiment card's): the first number after the last ``####``, else the content of the
last ``\\boxed{}``; normalised by stripping commas, a leading ``$`` and a trailing ``.``, and writing an
integral float as an integer (``18.0`` -> ``18``). Reward = exact string match with the gold answer
(the number after ``####`` in the item's ``answer``), normalised the same way.
"""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

PROMPT_SUFFIX = " Reason step by step, then give the final answer as a number after '####'."
PROMPT_TEMPLATE = "chat template of the model, one user message: question.strip() + " + repr(PROMPT_SUFFIX)
PARSER_RULE = ("first number after the last '####', else the last \\boxed{}; strip commas, '$' and a trailing "
               "'.', integral floats as integers; exact string match to the normalised gold after '####'")

HF_DATASET = ("openai/gsm8k", "main")  # the default source: datasets.load_dataset(*HF_DATASET, split=split)

_NUMBER = re.compile(r"-?\$?\s*(?:\d[\d,]*(?:\.\d*)?|\.\d+)")


def normalize(text: Any) -> str | None:
    """Canonical form of a numeric answer, or None when ``text`` is not a single number."""
    if not isinstance(text, str):
        return None
    s = text.strip().replace(",", "").replace("$", "").replace(" ", "")
    while s.endswith("."):
        s = s[:-1]
    if not re.fullmatch(r"-?(?:\d+(?:\.\d*)?|\.\d+)", s):
        return None
    try:
        d = Decimal(s)
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        return None
    if d == d.to_integral_value():
        return str(int(d))
    return format(d.normalize(), "f")


def _first_number(text: str) -> str | None:
    m = _NUMBER.search(text)
    return normalize(m.group(0)) if m else None


def _last_boxed(text: str) -> str | None:
    i = text.rfind("\\boxed{")
    if i < 0:
        return None
    j, depth = i + len("\\boxed{"), 1
    start = j
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    if depth:
        return None
    return text[start:j - 1]


def extract_answer(text: Any) -> str | None:
    """The model's final answer, normalised, or None when no answer can be extracted."""
    if not isinstance(text, str):
        return None
    if "####" in text:
        got = _first_number(text.rsplit("####", 1)[1])
        if got is not None:
            return got
    boxed = _last_boxed(text)
    if boxed is not None:
        return normalize(boxed) or _first_number(boxed)
    return None


def gold_answer(item: dict) -> str:
    """The normalised gold answer of a GSM8K item (the number after ``####`` in ``answer``)."""
    got = _first_number(str(item["answer"]).rsplit("####", 1)[-1])
    if got is None:
        raise ValueError(f"item has no numeric gold answer: {str(item.get('answer'))[-80:]!r}")
    return got


def score(completion: str, item: dict) -> tuple[float, str | None]:
    """(reward, extracted answer): 1.0 on exact match of the normalised answers, else 0.0."""
    pred = extract_answer(completion)
    return (1.0 if pred is not None and pred == gold_answer(item) else 0.0), pred


def user_message(item: dict) -> str:
    return str(item["question"]).strip() + PROMPT_SUFFIX


def load_items(path: Path, split: str, limit: int | None = None) -> list[dict]:
    """Items of the local file ``{path}/{split}.jsonl`` with stable ids ``gsm8k-{split}-{line index}``."""
    f = Path(path) / f"{split}.jsonl"
    out: list[dict] = []
    with open(f, encoding="utf-8") as fh:
        for i, line in enumerate(fh):
            if limit is not None and len(out) >= limit:
                break
            if line.strip():
                row = json.loads(line)
                out.append({"id": f"gsm8k-{split}-{i}", "question": row["question"], "answer": row["answer"]})
    return out


def load_hf_items(split: str, limit: int | None = None) -> list[dict]:
    """Items of the Hugging Face dataset ``openai/gsm8k`` (config ``main``) with ids ``gsm8k-{split}-{row index}``.

    Needs the network on first use (``datasets`` caches it); a failure raises a RuntimeError that names
    ``--data DIR``, the way to train from a local copy instead."""
    name, config = HF_DATASET
    try:
        import datasets  # noqa: PLC0415 - heavy, and only this source needs it

        rows = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001 - any failure (no network, no package, hub error) gets the same advice
        raise RuntimeError(
            f"could not load GSM8K split {split!r} from Hugging Face ({name!r}, {config!r}): "
            f"{type(e).__name__}: {e}. Give a local copy with --data DIR (a folder with train.jsonl and "
            f"test.jsonl, one JSON object a line with 'question' and 'answer')."
        ) from e
    out: list[dict] = []
    for i, row in enumerate(rows):
        if limit is not None and len(out) >= limit:
            break
        out.append({"id": f"gsm8k-{split}-{i}", "question": row["question"], "answer": row["answer"]})
    return out


def load_split(split: str, data_dir: Path | str | None = None, limit: int | None = None) -> list[dict]:
    """Items of one GSM8K split: ``{data_dir}/{split}.jsonl`` when ``data_dir`` is given, else the Hugging
    Face dataset ``openai/gsm8k`` (``main``). The same shape and ids either way."""
    if data_dir is not None:
        return load_items(Path(data_dir).expanduser(), split, limit)
    return load_hf_items(split, limit)


def source_name(data_dir: Path | str | None) -> str:
    """Where :func:`load_split` reads from, for the run record (``local`` or ``hf:openai/gsm8k/main``)."""
    return "local" if data_dir is not None else "hf:" + "/".join(HF_DATASET)


def item_sha256(item: dict) -> str:
    key = json.dumps({"question": item["question"], "answer": item["answer"]}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()
