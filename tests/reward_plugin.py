"""A test-only reward, defined the way a user adds one: one :class:`Reward` entry, no code outside ``task/``.

``hits``: the share of the band's transmitters that a reported centre finds (recall over transmitters, a
maximum matching as ``match_iou`` counts it). It never charges a wrong centre, so padding pays: the audit,
held to this reward's own bars, must say so. Imported by tests/test_reward_objects.py, and by the MCP server
process that test starts (:func:`register`).
"""

from __future__ import annotations

from spectrum_rft.task import reward as sr

HITS = sr.Reward(
    "test_hits",
    lambda s: sr.match_count(s.centres, s.truth) / len(s.truth) if s.truth else 1.0,
    prompt="(Test reward.) Each transmitter a reported centre finds earns an equal share of the score.",
    audit=sr.AuditBars(memoryless_max=0.5, memory_bar=1.5),
)


def register() -> None:
    """Put :data:`HITS` into this process's reward table (the server process; tests use monkeypatch)."""
    sr.REWARD_TABLE[HITS.name] = HITS
