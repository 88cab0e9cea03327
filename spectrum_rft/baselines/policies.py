"""Scripted reference policies (the reward audit that runs them: :mod:`spectrum_rft.baselines.audit`).

A policy maps what a model would have read (the scan texts it was shown, oldest first, parsed by
:func:`spectrum_rft.task.scan_format.parse_scan`) to a ``submit_report`` action. They read the *rendered
text* only, exactly like a model, so they exercise the prompt format too. The one exception is ``oracle``:
it is privileged (it is handed the true transmitters, :func:`oracle_report`) and is labelled so everywhere
it appears.

* ``empty``       reports nothing.
* ``memoryless``  reports the current scan's peaks.
* ``accumulate``  keeps every peak it has read (the current scan, earlier scans in its history, and the
                  environment's echo of its previous report), de-duplicated within half a width by a
                  running mean; past the region cap it keeps the most often seen.
* ``accumulate-K`` the same memory, reporting at most K regions (the most often seen, then the most recently):
                  a memory that keeps what recurs and leaves the report room for new peaks.
* ``explore-P``   ``memoryless``, and in P % of the scans whose echo holds a centre off every current peak, one
                  such centre drawn at random (its own seeded stream): an SFT target that keeps a warm start
                  trying the echo without teaching it which echoed centre is right (issue 40's exploration gate).
* ``oracle``      reports the true transmitters (privileged).
* ``carpet-K``    K evenly spaced regions, ignoring the scans (blind).
* ``random-K``    K uniformly random centres, ignoring the scans (blind).

Composites ``BASE+PAD`` (``BASE`` is ``memoryless`` or ``accumulate``) report the base policy's regions and
then pad the report up to the region cap. With ``memoryless`` as the base they use no memory at all, so a
reward that lets one of them beat plain ``memoryless`` pays for something other than memory:

* ``+random-K`` / ``+random``  K (or: up to the cap) uniformly random centres from the policy's own stream.
* ``+carpet``                  fill the free slots with evenly spaced regions across the band.
* ``+shift-S``                 copies of its own regions moved S MHz up and down (hedging the peak jitter).
* ``+dup``                     duplicates of its own regions up to the cap (the last evidence run's habit).

The reward audit runs them all and shows whether a reward measures memory: memory-free policies (blind
or composite) must not beat the memoryless one by much, and accumulation must beat it by a lot.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Sequence

import numpy as np

from spectrum_rft.rollouts.model_calls import Reply
from spectrum_rft.task.presets import TX_WIDTH
from spectrum_rft.task.scan_format import ParsedScan, parse_scan


def _report(centres: Sequence[float], widths: Sequence[float], cap: int, band: tuple[float, float]) -> dict:
    lo, hi = band
    cs = [c if lo <= c <= hi else min(hi, max(lo, c)) for c in centres[:cap]]
    return {"center_freqs": [float(c) for c in cs], "bandwidths": [float(w) if w > 0.1 else 0.1 for w in widths[:cap]]}


class Policy:
    """A scripted policy: ``observe`` each scan it reads (oldest first), then ``act``."""

    name = "policy"

    def observe(self, scan: ParsedScan) -> None:
        self.last = scan

    def act(self) -> dict:
        raise NotImplementedError

    def act_on(self, scans: Sequence[ParsedScan]) -> dict:
        """Stateless use (a policy served as a model): replay what it was sent, then act."""
        for sc in scans:
            self.observe(sc)
        return self.act()


class Empty(Policy):
    name = "empty"

    def act(self) -> dict:
        return {"center_freqs": []}


class Memoryless(Policy):
    name = "memoryless"

    def act(self) -> dict:
        cur = self.last
        return _report([p[0] for p in cur.peaks], [p[2] for p in cur.peaks], cur.max_regions, cur.band)


class Accumulate(Policy):
    """Union of everything read, de-duplicated within half a width (running mean of the centre);
    the environment's echo of its previous report counts as remembered regions."""

    name = "accumulate"

    def __init__(self, default_width: float = TX_WIDTH, keep: int | None = None):
        self.items: list[list[float]] = []  # [centre, width, count, last_seen]
        self.t = 0
        self.default_width = default_width
        self.keep = keep  # report at most this many regions (None: up to the region cap)
        if keep is not None:
            self.name = f"accumulate-{keep}"

    def _add(self, freq: float, width: float) -> None:
        best, dist = None, 0.0
        for it in self.items:
            d = abs(it[0] - freq)
            if d <= 0.5 * (it[1] if it[1] > width else width) and (best is None or d < dist):
                best, dist = it, d
        if best is None:
            self.items.append([freq, width, 1.0, self.t])
        else:
            n = best[2] + 1.0
            best[0] += (freq - best[0]) / n
            best[1] += (width - best[1]) / n
            best[2], best[3] = n, self.t

    def observe(self, scan: ParsedScan) -> None:
        self.last = scan
        self.t += 1
        if scan.echo is not None:
            for c in scan.echo:
                self._add(c, self.default_width)
        for f, _, w in scan.peaks:
            self._add(f, w)

    def act(self) -> dict:
        cur = self.last
        items = self.items
        cap = cur.max_regions if self.keep is None else min(self.keep, cur.max_regions)
        if len(items) > cap:
            items = sorted(items, key=lambda it: (it[2], it[3]), reverse=True)[:cap]
        items = sorted(items)
        return _report([it[0] for it in items], [it[1] for it in items], cap, cur.band)


class Explore(Policy):
    """``memoryless``, plus in ``pct`` % of the scans one echoed centre lying more than half a width from every
    current peak, drawn uniformly from those (nothing when there is none): a random guess at what the echo
    remembers, so the share of reports that keep an echoed non-peak centre is set, and which one carries no
    information. It reads the echo, so it is not memory-free."""

    def __init__(self, pct: int, seed: int = 0):
        self.pct, self.name = pct, f"explore-{pct}"
        self.rng = np.random.default_rng([seed, 0xE4B])

    def act(self) -> dict:
        cur = self.last
        cs = [p[0] for p in cur.peaks]
        off = [e for e in (cur.echo or ()) if all(abs(e - c) > 0.5 * TX_WIDTH for c in cs)]
        if off and self.rng.random() * 100 < self.pct:
            cs.append(float(off[int(self.rng.integers(len(off)))]))
        cs = sorted(cs)
        return _report(cs, [TX_WIDTH] * len(cs), cur.max_regions, cur.band)


class Carpet(Policy):
    """Blind: K evenly spaced regions."""

    def __init__(self, k: int):
        self.k, self.name = k, f"carpet-{k}"

    def act(self) -> dict:
        lo, hi = self.last.band
        n = min(self.k, self.last.max_regions)
        step = (hi - lo) / n
        return _report([lo + (i + 0.5) * step for i in range(n)], [step] * n, self.last.max_regions, self.last.band)


class RandomK(Policy):
    """Blind: K uniformly random centres from its own seeded stream."""

    def __init__(self, k: int, seed: int = 0):
        self.k, self.name = k, f"random-{k}"
        self.rng = np.random.default_rng([seed, 0xB11D])

    def act(self) -> dict:
        lo, hi = self.last.band
        n = min(self.k, self.last.max_regions)
        return _report(sorted(self.rng.uniform(lo, hi, size=n)), [TX_WIDTH] * n, self.last.max_regions, self.last.band)


class Padded(Policy):
    """A base policy's report padded toward the region cap (``memoryless+random-13``, ``accumulate+carpet``)."""

    def __init__(self, base: Policy, pad: str, k: int | None = None, shift: float = 0.0, seed: int = 0):
        self.base, self.pad, self.k, self.shift = base, pad, k, shift
        suffix = {"random": f"random-{k}" if k is not None else "random", "shift": f"shift-{shift:g}"}.get(pad, pad)
        self.name = f"{base.name}+{suffix}"
        self.rng = np.random.default_rng([seed, 0x9AD])

    def observe(self, scan: ParsedScan) -> None:
        self.last = scan
        self.base.observe(scan)

    def act(self) -> dict:
        rep = self.base.act()
        cs, ws = list(rep["center_freqs"]), list(rep.get("bandwidths") or [TX_WIDTH] * len(rep["center_freqs"]))
        cap, (lo, hi) = self.last.max_regions, self.last.band
        free = cap - len(cs)
        if self.pad == "random":
            n = free if self.k is None else min(self.k, free)
            extra = [(float(c), TX_WIDTH) for c in self.rng.uniform(lo, hi, size=n)]
        elif self.pad == "carpet":
            step = (hi - lo) / free if free > 0 else 0.0
            extra = [(lo + (i + 0.5) * step, TX_WIDTH) for i in range(free)]
        elif self.pad == "shift":
            moved = [(c + d, w) for c, w in zip(cs, ws) for d in (self.shift, -self.shift)]
            extra = moved[:free]
        else:  # dup
            extra = [(cs[i % len(cs)], ws[i % len(cs)]) for i in range(free)] if cs else []
        cs += [c for c, _ in extra]
        ws += [w for _, w in extra]
        return _report(cs, ws, cap, self.last.band)


def oracle_report(truth: Sequence[tuple[float, float]]) -> dict:
    """PRIVILEGED: the exact transmitters."""
    return {"center_freqs": [c for c, _ in truth], "bandwidths": [w for _, w in truth]}


POLICY_NAMES = ("empty", "memoryless", "accumulate", "accumulate-K", "explore-P", "oracle", "carpet-K", "random-K",
                "BASE+random[-K]", "BASE+carpet", "BASE+shift-S", "BASE+dup")
_PAD = re.compile(r"(memoryless|accumulate)\+(?:(random)(?:-(\d+))?|(carpet)|(shift)-(\d+(?:\.\d+)?)|(dup))")


def is_memory_free(name: str) -> bool:
    """Whether a policy uses no memory at all (blind tilings, and memoryless padded in any way)."""
    return name.startswith(("carpet-", "random-", "memoryless+"))


def make_policy(name: str, seed: int = 0) -> Policy | None:
    """A fresh text-reading policy by name (``carpet-8``, ``random-16``...); None for the privileged oracle."""
    simple = {"empty": Empty, "memoryless": Memoryless, "accumulate": Accumulate}
    if name in simple:
        return simple[name]()
    if name == "oracle":
        return None
    m = re.fullmatch(r"accumulate-(\d+)", name)
    if m:
        if int(m.group(1)) < 1:
            raise ValueError(f"{name}: K must be >= 1")
        return Accumulate(keep=int(m.group(1)))
    m = re.fullmatch(r"explore-(\d+)", name)
    if m:
        if not 0 <= int(m.group(1)) <= 100:
            raise ValueError(f"{name}: P is a percentage, 0 to 100")
        return Explore(int(m.group(1)), seed)
    m = re.fullmatch(r"(carpet|random)-(\d+)", name)
    if m:
        n = int(m.group(2))
        if n < 1:
            raise ValueError(f"{name}: K must be >= 1")
        return Carpet(n) if m.group(1) == "carpet" else RandomK(n, seed)
    m = _PAD.fullmatch(name)
    if m:
        base, rnd, k, carpet, shift, s, dup = m.groups()
        if k is not None and int(k) < 1:
            raise ValueError(f"{name}: K must be >= 1")
        if shift and not float(s) > 0:
            raise ValueError(f"{name}: the shift must be > 0 MHz")
        return Padded(simple[base](), rnd or carpet or shift or dup, int(k) if k else None,
                      float(s) if s else 0.0, seed)
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")


class ScriptedModel:
    """A scripted policy as the episode driver's model (:func:`spectrum_rft.rollouts.driver.drive_now`), in
    this process and stateful: at each new scan it parses the scan text the driver just showed (the newest
    message that is a scan), observes it once and answers with one ``submit_report`` call.

    ``history=True`` keeps one policy for the episode (it remembers every scan it read: an ICL-style agent);
    False makes it anew for each scan, seeded ``seed + scan``, so it knows only the scan in front of it (plus
    what the memory mode renders in it). ``read_echo=False``: the policy ignores the env's echo of its
    previous report (the TRL adapter's prefix, so the real arm and its scrambled control submit the same
    prefix); ``widths=False``: it reports centres only, widths left to the env's default (as the TRL warm
    start is taught to). ``oracle`` reports the episode env's truth (privileged: an in-process episode's
    ``env``)."""

    def __init__(self, name: str, seed: int = 0, *, history: bool = True, read_echo: bool = True,
                 widths: bool = True):
        self.name, self.seed, self.history, self.read_echo, self.widths = name, seed, history, read_echo, widths
        self.policy = make_policy(name, seed)  # unknown names fail loudly
        self.seen: int | None = None  # the scan (0-based) last observed
        self.calls = 0

    async def __call__(self, messages: list[dict], tools: list[dict], ep, stats):
        policy = self.policy
        if policy is None:
            action = oracle_report(ep.env.truth())
        else:
            if ep.scan != self.seen:
                scan = next((sc for m in reversed(messages) if isinstance(m.get("content"), str)
                             and (sc := parse_scan(m["content"])) is not None), None)
                if scan is None:
                    raise ValueError(f"{self.name}: no scan in the messages the driver sent")
                if not self.history:
                    fresh = make_policy(self.name, self.seed + ep.scan)
                    assert fresh is not None  # the name made a policy at construction: not the oracle
                    policy = self.policy = fresh
                policy.observe(scan if self.read_echo else dataclasses.replace(scan, echo=None))
                self.seen = ep.scan
            action = policy.act()
        if not self.widths:
            action = {"center_freqs": action["center_freqs"]}
        self.calls += 1
        call = {"id": f"call_{self.calls}", "type": "function",
                "function": {"name": "submit_report", "arguments": json.dumps(action)}}
        return Reply({"role": "assistant", "content": "", "tool_calls": [call]}, {})
