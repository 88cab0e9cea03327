"""Why a model request failed: the causes, the error-row message prefix and the env fault kind of each cause.

The one definition both sides read: the rollout loop (:mod:`spectrum_rft.rollouts.loop`) classifies a failed
request into a cause, records the cause's fault kind in the env and, when the model never answered, marks
the row with :data:`MODEL_FAILURE`; ``spectrum-rft eval`` (:mod:`spectrum_rft.tools.evaluation.summary`)
reads the causes back from error rows and from fault counts. No imports: cheap for the reporting side.
"""

from __future__ import annotations

# The error message of a row whose model never produced a usable reply starts with this.
MODEL_FAILURE = "model never produced a usable reply"
# Every cause, in the order reports list them; "error" is the catch-all.
FAILURE_CAUSES = ("connection refused", "http 5xx", "timeout", "rate limited", "empty reply", "malformed reply",
                  "missing API key", "bad request", "error")
# The env fault kind the loop records for a failed request of each cause, and back.
FAULT_OF_CAUSE: dict[str, str] = {
    "connection refused": "llm_connection", "http 5xx": "llm_5xx", "timeout": "llm_timeout",
    "rate limited": "llm_rate_limited", "empty reply": "llm_empty_choices", "malformed reply": "llm_malformed_reply",
    "missing API key": "llm_missing_key", "bad request": "llm_bad_request", "error": "llm_error"}
# litellm's words for an HTTP 200 whose body it could not read as a chat completion (``tool_calls`` a string, a
# message that is not an object): it raises them as an HTTP 500, which no server sent
MALFORMED_REPLY_TEXT = "Invalid response object"
CAUSE_OF_FAULT: dict[str, str] = {fault: cause for cause, fault in FAULT_OF_CAUSE.items()}
# litellm's and the OpenAI client's words for a request made with no API key (no request was sent): a regex
MISSING_KEY_TEXT = r"Missing credentials|api_key client option must be set|no api key|api key is missing|_API_KEY is not set"

# The env's reason for a scan skipped because every request of the model failed (its fault kind: ``skip_`` + it).
SKIP_MODEL_FAILURE = "llm_failure"
MOSTLY_SKIPPED = 0.5  # more than this share of a model's scans skipped because its requests failed: no result


def no_result(rows: int, errored: int, *, scans: int = 0, skipped: int = 0, skipped_by_model: int = 0,
              cause: str | None = None) -> str | None:
    """Why a model's numbers are no result (a few words), or None when they are one: every rollout errored,
    every scan was skipped, or more than :data:`MOSTLY_SKIPPED` of its scans were skipped because its requests
    failed. Such a model's table cells would be empty reports' scores (an empty report's available-IoU is
    high: a dead endpoint would look like a model that scored), so every table (eval, bench90, report) shows
    it as failed instead, with this reason first. ``scans``, ``skipped``: the env's counts over the rows;
    ``skipped_by_model``: those skipped for :data:`SKIP_MODEL_FAILURE`; ``cause``: one of
    :data:`FAILURE_CAUSES`."""
    why = f", cause: {cause}" if cause else ""
    if rows and errored >= rows:
        return f"every rollout errored ({errored}/{rows}){why}"
    if scans and skipped >= scans:
        return f"every scan of every row was skipped ({skipped}/{scans})"
    if scans and skipped_by_model / scans > MOSTLY_SKIPPED:
        return f"{skipped_by_model}/{scans} scans skipped because model requests failed{why}"
    return None
