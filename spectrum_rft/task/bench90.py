"""bench90: the CLBench-style 90-scan schedule, as a preset of our environment (the runner that plays a
model on it is :mod:`spectrum_rft.tools.bench90`).

CLBench (``blind_spectrum_monitoring``) is not installable here and its corpus may not be redistributed,
so the schedule is re-implemented from its published facts (``docs/BENCH90.md`` lists them and every
choice the facts leave open). One band, 13 fixed channels, 90 scans in three stages of 30, five runs::

    spectrum-rft bench90 --model spectrum/memoryless --system stateless --json
    spectrum-rft bench90 --model accounts/me/models/m --system icl --runs 5

Pieces, in the order a reader needs them:

* the schedule: :data:`CHANNELS`, :data:`STAGES`, :func:`stage_scans` (a stage's 30 scans in canonical
  order, from the stage seed), :func:`run_order` (which canonical scan is played at each position);
* :data:`BENCH90`, a :class:`spectrum_rft.task.episode.Preset` (``episode(seed)`` reads ``seed`` as the
  run index 0..4), which ``get_preset("bench90")`` returns.

The runners (scripted ``spectrum/<policy>`` models played directly on the environment, or any litellm
model through the in-process rollout processor), the summary (per-run and mean available-IoU, stage
means, first-10 vs last-10) and the command live in :mod:`spectrum_rft.tools.bench90`.

Every scan is scored by the environment with ``reward="avail_iou"`` (CLBench's metric) against the 13
canonical channels; occupied-IoU is reported as a diagnostic.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from spectrum_rft.task.episode import EpisodeDraw, Peak, Scan

# --------------------------------------------------------------------------------------------------
# The schedule (published facts; see docs/BENCH90.md)
# --------------------------------------------------------------------------------------------------

BAND: tuple[float, float] = (0.0, 168.0)
NOISE_FLOOR = -60.0
CHANNEL_POWER = -40.0
WIDE_WIDTH, NARROW_WIDTH = 15.0, 5.0
N_RUNS = 5
# CLBench's agent systems, each as our memory mode; every scan scored by CLBench's metric
SYSTEMS: dict[str, str] = {"stateless": "none", "icl": "icl", "icl_notepad": "icl_notepad", "scaffold": "scaffold"}
REWARD = "avail_iou"
SCANS_PER_STAGE = 30
SHUFFLE_SEED_BASE = 42  # run r > 0 shuffles within stages with default_rng(42 + r)

# Detector and interference model (per scan).
CENTRE_JITTER = 0.5  # true centre + U(-0.5, 0.5)
P_DETECT = 0.85
FREQ_SIGMA = 1.0
POWER_SIGMA = 5.0
WIDTH_REL_SIGMA = 0.15  # width = bw + N(0, 0.15 bw), floored at MIN_WIDTH
MIN_WIDTH = 1.0
P_SPIKES, SPIKE_COUNT = 0.2, (1, 3)
SPIKE_POWER, SPIKE_WIDTH = (-55.0, -40.0), (0.5, 3.0)
P_FALSE_ALARM = 0.2
FA_POWER = (5.0, 2.0)  # noise floor + N(5, 2)
FA_WIDTH = (1.0, 5.0)


class Channel(NamedTuple):
    number: int  # CLBench's numbering: 1-7 wideband, 8-13 narrowband
    centre: float
    width: float


def _channels() -> tuple[Channel, ...]:
    wide = [Channel(k + 1, 7.5 + 24.0 * k, WIDE_WIDTH) for k in range(7)]
    narrow = [Channel(8 + k, 19.5 + 24.0 * k, NARROW_WIDTH) for k in range(6)]
    return tuple(sorted(wide + narrow, key=lambda c: c.centre))


# Sorted by centre (the environment's truth order: transmitter index = position here).
CHANNELS: tuple[Channel, ...] = _channels()
INDEX: dict[int, int] = {c.number: i for i, c in enumerate(CHANNELS)}  # channel number -> truth index


@dataclass(frozen=True)
class Stage:
    name: str
    seed: int
    round_robin: tuple[int, ...]  # channel numbers, cycled n_active at a time
    n_active: int
    background: tuple[int, ...] = ()  # channel numbers, each independently active with p_background
    p_background: float = 0.1


STAGES: tuple[Stage, ...] = (
    Stage("five_ch_wide", 42, (1, 2, 3, 4, 5), 2, (6, 7, 8, 9, 10, 11, 12, 13)),
    Stage("five_plus_four_mixed", 43, (1, 2, 3, 4, 5, 8, 9, 10, 11), 3, (6, 7, 12, 13)),
    Stage("full_grid_active", 44, tuple(range(1, 14)), 4),
)


def round_robin(stage: Stage, i: int) -> tuple[int, ...]:
    """Channel numbers the round-robin turns on at canonical scan ``i`` of a stage: positions
    ``i * n_active .. i * n_active + n_active - 1`` of the cycle, modulo its length."""
    rr, k = stage.round_robin, stage.n_active
    return tuple(rr[(i * k + j) % len(rr)] for j in range(k))


def _r1(x: float) -> float:
    return float(round(float(x), 1))


@lru_cache(maxsize=None)
def stage_scans(stage_index: int) -> tuple[Scan, ...]:
    """The 30 scans of a stage in canonical order, drawn from the stage seed alone.

    Per scan and in this order: the round-robin channels plus background channels (one uniform each);
    for every active channel (truth order) the centre jitter, the detection draw, then frequency, power
    and width noise; the interference spikes; the false alarm. Draws are made whether or not they are
    used, so each value always comes from the same position of the stream. Treat the result as
    read-only (it is cached and shared).
    """
    st = STAGES[stage_index]
    rng = np.random.default_rng(st.seed)
    scans = []
    for i in range(SCANS_PER_STAGE):
        on = set(round_robin(st, i))
        for ch in st.background:
            if rng.random() < st.p_background:
                on.add(ch)
        active = tuple(sorted(INDEX[ch] for ch in on))
        raw: list[tuple[float, float, float]] = []
        detected = []
        for t in active:
            c = CHANNELS[t]
            jitter = rng.uniform(-CENTRE_JITTER, CENTRE_JITTER)
            hit = rng.random() < P_DETECT
            dz, pz, wz = rng.standard_normal(3)
            if hit:
                detected.append(t)
                raw.append((_r1(c.centre + jitter + FREQ_SIGMA * dz), _r1(CHANNEL_POWER + POWER_SIGMA * pz),
                            _r1(max(MIN_WIDTH, c.width + WIDTH_REL_SIGMA * c.width * wz))))
        spikes = rng.random() < P_SPIKES
        n_spikes = int(rng.integers(SPIKE_COUNT[0], SPIKE_COUNT[1] + 1))
        su = rng.random((SPIKE_COUNT[1], 3))
        if spikes:
            for f, p, w in su[:n_spikes]:
                raw.append((_r1(BAND[0] + (BAND[1] - BAND[0]) * f),
                            _r1(SPIKE_POWER[0] + (SPIKE_POWER[1] - SPIKE_POWER[0]) * p),
                            _r1(SPIKE_WIDTH[0] + (SPIKE_WIDTH[1] - SPIKE_WIDTH[0]) * w)))
        fa = rng.random() < P_FALSE_ALARM
        ff, fw = rng.random(2)
        fz = rng.standard_normal()
        if fa:
            raw.append((_r1(BAND[0] + (BAND[1] - BAND[0]) * ff), _r1(NOISE_FLOOR + FA_POWER[0] + FA_POWER[1] * fz),
                        _r1(FA_WIDTH[0] + (FA_WIDTH[1] - FA_WIDTH[0]) * fw)))
        raw.sort()
        peaks = [Peak(f"P{j + 1}", f, p, w) for j, (f, p, w) in enumerate(raw)]
        scans.append(Scan(peaks, active, tuple(detected), note=st.name))
    return tuple(scans)


def check_run(run: Any) -> int:
    if isinstance(run, bool) or not isinstance(run, (int, np.integer)) or not 0 <= int(run) < N_RUNS:
        raise ValueError(f"bench90: the seed is the run index 0..{N_RUNS - 1}, got {run!r} (a bench90 row "
                         "must pin its seed; a row-hash seed is not a run index)")
    return int(run)


@lru_cache(maxsize=None)
def run_order(run: int) -> tuple[int, ...]:
    """Canonical scan index (0..89) played at each position of a run. Run 0 is the canonical order;
    run r > 0 permutes each stage's 30 scans with one ``default_rng(42 + r)``, stage by stage, so the
    stage boundaries stay at 30 and 60."""
    run = check_run(run)
    if run == 0:
        return tuple(range(SCANS_PER_STAGE * len(STAGES)))
    rng = np.random.default_rng(SHUFFLE_SEED_BASE + run)
    out: list[int] = []
    for s in range(len(STAGES)):
        out += [s * SCANS_PER_STAGE + int(j) for j in rng.permutation(SCANS_PER_STAGE)]
    return tuple(out)


def stage_of(position: int) -> int:
    """The stage (0, 1, 2) a scan position belongs to (the same in every run)."""
    return position // SCANS_PER_STAGE


@dataclass(frozen=True)
class Bench90Preset:
    """The schedule as a :class:`spectrum_rft.task.episode.Preset`. ``episode(seed)``: ``seed`` is the run index."""

    name: str = "bench90"
    band: tuple[float, float] = BAND
    n_scans: int = SCANS_PER_STAGE * len(STAGES)
    # Room for all 13 channels plus some interference; CLBench's own cap is not among the published facts.
    max_regions: int = 24
    report_width: float | None = None  # reports carry a bandwidth per region
    default_width: float = 10.0  # a region reported without a bandwidth
    # spectrum_rft.task.environment.env_for_row: a row plays its pinned environment_context["seed"] (the run index),
    # never a seed hashed from its row id.
    seed_is_run_index: bool = True

    def episode(self, seed: int) -> EpisodeDraw:
        order = run_order(check_run(seed))
        canon = [sc for s in range(len(STAGES)) for sc in stage_scans(s)]
        # Fresh Scan objects (same peaks): the cached canonical ones are never handed out.
        scans = [Scan(list(canon[i].peaks), canon[i].active, canon[i].detected, canon[i].note) for i in order]
        return EpisodeDraw(self.band, [(c.centre, c.width) for c in CHANNELS], scans, NOISE_FLOOR)


BENCH90 = Bench90Preset()

