"""What an episode is: a band's transmitters and every scan of it, drawn from a seed by a :class:`Preset`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol



class Peak(NamedTuple):
    id: str
    freq: float
    power: float
    width: float


@dataclass(slots=True)
class Scan:
    peaks: list[Peak]
    active: tuple[int, ...]  # transmitters transmitting this scan
    detected: tuple[int, ...]  # ... of which the detector shows a peak
    note: str = ""  # optional per-scan metadata line (e.g. a stage name)


@dataclass(slots=True)
class EpisodeDraw:
    """What a preset draws for a seed: the band, its transmitters and every scan of the episode (the hidden
    world; an episode as a transport carries it is :class:`spectrum_rft.rollouts.episode.Episode`)."""

    band: tuple[float, float]
    truth: list[tuple[float, float]]  # (centre, bandwidth) per transmitter
    scans: list[Scan]
    noise_floor: float


class Preset(Protocol):
    """What the env reads of a preset (read-only: the presets are frozen dataclasses)."""

    @property
    def name(self) -> str: ...
    @property
    def band(self) -> tuple[float, float]: ...
    @property
    def n_scans(self) -> int: ...
    @property
    def max_regions(self) -> int: ...
    @property
    def report_width(self) -> float | None:
        """Fixed reported width, or None when reports carry bandwidths."""
    @property
    def default_width(self) -> float:
        """Width used for a report without bandwidths when report_width is None."""
    @property
    def seed_is_run_index(self) -> bool:
        """True: ``episode(seed)`` reads the seed as the run index of a fixed schedule (bench90), so a row must
        pin it (``environment_context["seed"]``); it is never hashed from the row id."""

    def episode(self, seed: int) -> EpisodeDraw:
        """The whole episode for a seed (band, truth and every scan)."""
        ...
