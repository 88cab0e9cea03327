"""Shared test settings.

* Every test runs offline: eval-protocol uploads off, litellm's bundled price map, no browser, no
  Fireworks key (``spectrum_rft.tools.evaluation.OFFLINE_ENV``, the same settings ``spectrum-rft eval`` gives its child).
  litellm reads LITELLM_LOCAL_MODEL_COST_MAP when it is first imported, before any conftest runs, so
  ``scripts/test.sh`` exports these too; here they cover what tests start themselves.
* Hypothesis explores new random examples on every local run (that is how it finds edge cases), but in
  CI (``CI`` set) it runs derandomized, so a submission's result does not depend on the draw of the day.
"""

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from spectrum_rft.tools.evaluation import OFFLINE_ENV  # noqa: E402

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session", autouse=True)
def offline_env():
    with pytest.MonkeyPatch.context() as mp:
        for k, v in OFFLINE_ENV.items():
            mp.setenv(k, v)
        mp.delenv("FIREWORKS_API_KEY", raising=False)
        yield


# ---- the rollout-path tests' servers (tests/test_mcp_path.py, test_rollout_failures.py, test_rollout_parity.py) ----


@pytest.fixture
def dummy_openai_key(monkeypatch):
    """The loopback model is an OpenAI-compatible endpoint: litellm wants a key (offline settings above)."""
    monkeypatch.setenv("OPENAI_API_KEY", "dummy")


@pytest.fixture(scope="module")
def mcp_server():
    """One real spectrum MCP server for the module, on a free port; always stopped."""
    from spectrum_rft.rollouts.mcp_client import SpectrumServer  # noqa: PLC0415

    server = SpectrumServer().start()  # inherits the session's offline settings
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def loopback():
    """One loopback chat server (tests/loopback_llm.py) for the module."""
    from loopback_llm import LoopbackLLM  # noqa: PLC0415

    s = LoopbackLLM().start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def llm(loopback):
    """The module's loopback server, reset to play the accumulate policy."""
    from loopback_llm import policy_responder  # noqa: PLC0415

    loopback.responder = policy_responder("accumulate")
    loopback.requests.clear()
    loopback.count = 0
    return loopback
