"""The in-process rollout path (the design card's entry point; the code is :mod:`spectrum_rft.rollouts.turn`)."""

from spectrum_rft.rollouts.turn import SpectrumTurnRolloutProcessor

__all__ = ["SpectrumTurnRolloutProcessor"]
