"""Scripted reference policies and the reward audit.

A policy maps what a model would have read (the scan texts it was shown, oldest first) to a
``submit_report`` action. They read the *rendered text* only, exactly like a model, so they exercise the
prompt format too. The one exception is ``oracle``: it is privileged (it is handed ``env.truth()``) and is
labelled so everywhere it appears.

* ``empty``       reports nothing.
* ``memoryless``  reports the current scan's peaks.
* ``accumulate``  keeps every peak it has read (the current scan, earlier scans in its history, and the
                  environment's echo of its previous report), de-duplicated within half a width by a
                  running mean; past the region cap it keeps the most often seen.
* ``oracle``      reports the true transmitters (privileged).
* ``carpet-K``    K evenly spaced regions, ignoring the scans (blind).
* ``random-K``    K uniformly random centres, ignoring the scans (blind).

The reward audit (:func:`audit`) runs them all and shows whether a reward measures memory: blind
policies must not beat the memoryless one by much, and accumulation must beat it by a lot.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from spectrum_adapter import EnvConfig, SpectrumEnv, get_preset, seed_for_row

_HEADER = re.compile(r"^Scan (\d+)/(\d+) \| band ([\d.]+)-([\d.]+) MHz", re.M)
_PEAK = re.compile(r"^P\d+ (-?[\d.]+) (-?[\d.]+) (-?[\d.]+)$", re.M)
_ECHO = re.compile(r"^Your previous report \(centres, MHz\): (.*)$", re.M)
_CAP = re.compile(r"\(at most (\d+)\)")


@dataclass(slots=True)
class ParsedScan:
    scan: int
    n_scans: int
    band: tuple[float, float]
    peaks: list[tuple[float, float, float]]  # (freq, power, width)
    echo: list[float] | None
    max_regions: int


def parse_scan(text: str) -> ParsedScan | None:
    """Parse one rendered scan (``spectrum_templates/scan.j2``); None if ``text`` is not a scan."""
    h = _HEADER.search(text)
    if h is None:
        return None
    peaks = [(float(f), float(p), float(w)) for f, p, w in _PEAK.findall(text)]
    e = _ECHO.search(text)
    echo = None
    if e is not None:
        body = e.group(1).strip()
        echo = [] if body.startswith("(") else [float(x) for x in body.split(",") if x.strip()]
    cap = _CAP.search(text)
    return ParsedScan(int(h.group(1)), int(h.group(2)), (float(h.group(3)), float(h.group(4))), peaks, echo,
                      int(cap.group(1)) if cap else 16)


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

    def __init__(self, default_width: float = 8.0):
        self.items: list[list[float]] = []  # [centre, width, count, last_seen]
        self.t = 0
        self.default_width = default_width

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
        if len(items) > cur.max_regions:
            items = sorted(items, key=lambda it: (it[2], it[3]), reverse=True)[: cur.max_regions]
        items = sorted(items)
        return _report([it[0] for it in items], [it[1] for it in items], cur.max_regions, cur.band)


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
        return _report(sorted(self.rng.uniform(lo, hi, size=n)), [8.0] * n, self.last.max_regions, self.last.band)


def oracle_report(truth: Sequence[tuple[float, float]]) -> dict:
    """PRIVILEGED: the exact transmitters."""
    return {"center_freqs": [c for c, _ in truth], "bandwidths": [w for _, w in truth]}


POLICY_NAMES = ("empty", "memoryless", "accumulate", "oracle", "carpet-K", "random-K")


def make_policy(name: str, seed: int = 0) -> Policy | None:
    """A fresh text-reading policy by name (``carpet-8``, ``random-16``...); None for the privileged oracle."""
    simple = {"empty": Empty, "memoryless": Memoryless, "accumulate": Accumulate}
    if name in simple:
        return simple[name]()
    if name == "oracle":
        return None
    m = re.fullmatch(r"(carpet|random)-(\d+)", name)
    if m:
        k = int(m.group(2))
        if k < 1:
            raise ValueError(f"{name}: K must be >= 1")
        return Carpet(k) if m.group(1) == "carpet" else RandomK(k, seed)
    raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")


def run_episode(env: SpectrumEnv, policy_name: str, seed: int, history: bool = True) -> dict:
    """Play one episode with a scripted policy and return ``env.metrics()``.

    ``history=True`` lets the policy remember every scan it has read (an ICL-style agent); with False
    it is rebuilt each scan and sees only the current one (plus whatever echo the memory mode renders).
    """
    obs, _ = env.reset(seed=seed)
    policy = make_policy(policy_name, seed)
    while not obs["done"]:
        if policy is None:
            action = oracle_report(env.truth())
        else:
            parsed = parse_scan(obs["prompt"])
            assert parsed is not None, "the environment rendered an unparseable scan"
            if not history:
                policy = make_policy(policy_name, seed + env.scan_index)
            policy.observe(parsed)
            action = policy.act()
        obs, _, _, _, info = env.step(action)
        if not info["advanced"]:
            raise RuntimeError(f"{policy_name} produced an invalid report: {info['error']}")
    return env.metrics()


def audit(preset: str, reward: str, episodes: int, policies: Sequence[str] | None = None,
          memory_mode: str = "none") -> dict:
    """The reward audit: every reference policy on the same ``episodes`` bands (row ids ``audit-i``)."""
    p = get_preset(preset)
    if policies is None:
        ks = sorted({1, 2, 4, 8, 12, p.max_regions} | set(range(2, p.max_regions + 1, 2)))
        policies = ["empty", "memoryless", "accumulate", "oracle"]
        policies += [f"carpet-{k}" for k in ks] + [f"random-{k}" for k in (4, 8, p.max_regions)]
    env = SpectrumEnv(EnvConfig(preset=preset, reward=reward, memory_mode=memory_mode))
    out: dict[str, dict] = {}
    for name in policies:
        acc = {"score": 0.0, "memory_gain": 0.0, "dormant_recall": 0.0}
        n_recall = 0
        for i in range(episodes):
            m = run_episode(env, name, seed_for_row(f"audit-{i}"))
            acc["score"] += m["score"]
            acc["memory_gain"] += m["memory_gain"] or 0.0
            if m["dormant_recall"] is not None:
                acc["dormant_recall"] += m["dormant_recall"]
                n_recall += 1
        out[name] = {
            "score": acc["score"] / episodes,
            "memory_gain": acc["memory_gain"] / episodes,
            "dormant_recall": acc["dormant_recall"] / n_recall if n_recall else None,
        }
    blind = {k: v for k, v in out.items() if k.startswith(("carpet-", "random-"))}
    best_blind = max(blind, key=lambda k: blind[k]["score"]) if blind else None
    return {"preset": preset, "reward": reward, "episodes": episodes, "policies": out,
            "best_blind": best_blind}


def audit_checks(result: dict) -> list[tuple[str, bool]]:
    """The acceptance checks of the reward audit, as (description, passed) lines."""
    pol = result["policies"]
    ml = pol["memoryless"]["score"]
    checks = [
        (f"memoryless <= 0.2 ({ml:.3f})", ml <= 0.2),
        (f"accumulate >= 3 x memoryless ({pol['accumulate']['score']:.3f} vs {3 * ml:.3f})",
         pol["accumulate"]["score"] >= 3 * ml),
        (f"oracle = 1.0 ({pol['oracle']['score']:.4f})", abs(pol["oracle"]["score"] - 1.0) < 1e-9),
        (f"|memory_gain(memoryless)| <= 0.01 ({pol['memoryless']['memory_gain']:+.4f})",
         abs(pol["memoryless"]["memory_gain"]) <= 0.01),
    ]
    if result.get("best_blind"):
        b = pol[result["best_blind"]]["score"]
        checks.append((f"best blind ({result['best_blind']}) <= 1.25 x memoryless ({b:.3f} vs {1.25 * ml:.3f})",
                       b <= 1.25 * ml))
    return checks


def format_audit_table(result: dict) -> str:
    """The audit as a Markdown table (score, memory_gain, dormant_recall, ratio to memoryless)."""
    ml = result["policies"]["memoryless"]["score"] if "memoryless" in result["policies"] else None
    lines = [f"preset `{result['preset']}`, reward `{result['reward']}`, {result['episodes']} episodes",
             "", "| policy | score | x memoryless | memory_gain | dormant_recall |", "|---|---|---|---|---|"]
    for name, m in result["policies"].items():
        ratio = f"{m['score'] / ml:.2f}" if ml else "-"
        dr = "-" if m["dormant_recall"] is None else f"{m['dormant_recall']:.3f}"
        label = f"{name} (privileged)" if name == "oracle" else name
        lines.append(f"| {label} | {m['score']:.3f} | {ratio} | {m['memory_gain']:+.3f} | {dr} |")
    return "\n".join(lines)


def audit_main(argv: list[str] | None = None) -> int:
    """``spectrum-rft audit --preset P --reward R --episodes N [--policies a,b] [--json] [--check]``."""
    import argparse  # noqa: PLC0415
    import json  # noqa: PLC0415

    ap = argparse.ArgumentParser(prog="spectrum-rft audit", description="Reward audit: does a reward measure memory?")
    ap.add_argument("--preset", default="default")
    ap.add_argument("--reward", default="default")
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--policies", default=None, help="comma-separated (default: the whole ladder + blind sweep)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the acceptance checks pass")
    a = ap.parse_args(argv)
    if a.episodes < 1:
        ap.error("--episodes must be >= 1")
    try:
        get_preset(a.preset)
        pols = a.policies.split(",") if a.policies else None
        for p in pols or []:
            make_policy(p)
        result = audit(a.preset, a.reward, a.episodes, pols)
    except ValueError as e:
        ap.error(str(e))
    checks = audit_checks(result) if {"memoryless", "accumulate", "oracle"} <= result["policies"].keys() else []
    if a.json:
        print(json.dumps({k: result[k] for k in ("preset", "reward", "episodes", "policies")}, indent=2))
    else:
        print(format_audit_table(result))
        if checks:
            print()
            for text, ok in checks:
                print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return 1 if a.check and not all(ok for _, ok in checks) else 0


# --------------------------------------------------------------------------------------------------
# PRIVILEGED truth registry for the oracle served as a model (spectrum_models)
# --------------------------------------------------------------------------------------------------
# A served oracle sees only messages. The dataset adapter registers every row's band here, keyed by the
# content of each of its scans (header and peak lines: unique per band in practice), so the oracle can
# look its band up from the scan it is shown. Used by nothing but the oracle.

_TRUTH: dict[str, list[tuple[float, float]]] = {}
_KEY_LINE = re.compile(r"^(Scan \d+/\d+ \|.*|P\d+ .*)$", re.M)


def scan_key(text: str) -> str:
    import hashlib  # noqa: PLC0415

    return hashlib.blake2b("\n".join(_KEY_LINE.findall(text)).encode(), digest_size=12).hexdigest()


def register_truth(env: SpectrumEnv) -> None:
    """Register a freshly reset env's band under the key of each of its scans."""
    truth = env.truth()
    for i in range(env.n_scans):
        _TRUTH[scan_key(env.render_scan(i))] = truth


def lookup_truth(scan_text: str) -> list[tuple[float, float]] | None:
    return _TRUTH.get(scan_key(scan_text))
