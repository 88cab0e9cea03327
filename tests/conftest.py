"""Shared test settings.

Hypothesis explores new random examples on every local run (that is how it finds edge cases), but in CI
(``CI`` set) it runs derandomized, so a submission's result does not depend on the draw of the day.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
