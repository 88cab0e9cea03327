"""What the model sees, on both rollout paths (the design card's entry point; the code is
:mod:`spectrum_rft.task.window`)."""

from spectrum_rft.task.window import approx_tokens, is_scan_message, report_call_ids, strip_think, window

__all__ = ["approx_tokens", "is_scan_message", "report_call_ids", "strip_think", "window"]
