"""Shared test settings.

* Every test runs offline: eval-protocol uploads off, litellm's bundled price map, no browser, no
  Fireworks key (``spectrum_eval.OFFLINE_ENV``, the same settings ``spectrum-rft eval`` gives its child).
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
