"""The whole-episode rule of evidence v4 (issue 40), fixed before any of the runs it judges.

Where the product measures: whole 12-scan episodes through ``spectrum-rft eval`` (the checkpoint served by
``serve-hf`` or vLLM, greedy, no grammar, memory mode ``scaffold``: the echo is the model's own previous
report) on >= :data:`MIN_BANDS` held-out bands, the warm start and every final checkpoint on the same bands.
Each is one eval folder (``rows.jsonl`` + ``summary.json`` of one model).

* Metric: the episode's ``beyond_current`` (what its reports earn beyond their centres at each scan's own
  peaks: memory's part); ``dormant_recall`` and ``memory_gain`` are reported beside it, secondary.
* Per band b: ``u_b`` = mean over the real arm's seeds of real_s(b) - warm(b); ``d_b`` = mean over seeds of
  real_s(b) - mean over seeds of control_s(b).
* u and d are the means over bands; their SE is a bootstrap over bands (:data:`BOOTSTRAP` resamples, seed
  :data:`BOOTSTRAP_SEED`): a band is drawn with all its seeds together, so the SE counts the variance the
  seeds share through the bands (and through the one warm start) rather than treating seeds as independent.
* Reported share of a checkpoint: scans not skipped / all scans of its episodes.
* **LEARNED** if u > 2 SE(u) and d > 2 SE(d) and every real checkpoint reports >= 95 % of its scans;
  **NOT LEARNED** if u <= 2 SE(u) and every checkpoint (real and control) reports >= 95 %; otherwise
  **INCONCLUSIVE** (also with fewer than :data:`MIN_BANDS` bands or :data:`MIN_SEEDS` seeds in an arm).

Before any run, :func:`power_check` says what the rule can detect on the held-out bands (issue 40 item 5): from the
warm start's band-to-band SD, against what perfect use of the echo earns on the same bands.

The held-out bands must be unseen: :func:`check_unseen` refuses a verdict when a band's fingerprint appears in
a training run's ``rollouts.jsonl`` or in an SFT/training dataset file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from spectrum_rft.task.memory import REAL_ECHO

METRIC = "beyond_current"
SECONDARY = ("dormant_recall", "memory_gain")
MIN_BANDS = 24
MIN_SEEDS = 3
MIN_REPORTED = 0.95
BOOTSTRAP = 10_000
BOOTSTRAP_SEED = 40  # the number: fixed, so the SE of a record is reproducible to the digit
Z_POWER = 0.84  # one-sided 80 % power: an effect (2 + Z_POWER) SE large is found > 2 SE four times in five


class VerdictInputError(ValueError):
    """Eval folders the rule cannot judge (one line: which folder, what is wrong)."""


def _env_record(row: dict) -> dict:
    extra = (row.get("execution_metadata") or {}).get("extra") or {}
    rec = extra.get("spectrum") if isinstance(extra, dict) else None
    return rec if isinstance(rec, dict) else {}


def load_episodes(folder: str | Path) -> dict[str, Any]:
    """One model's whole episodes from a ``spectrum-rft eval`` folder: per band (row id) its fingerprint, the
    metrics of the rule and its scans reported/total. A row that errored before its env recorded anything
    counts as every scan unreported and earns 0."""
    folder = Path(folder)
    try:
        summary = json.loads((folder / "summary.json").read_text())
        lines = (folder / "rows.jsonl").read_text().splitlines()
    except (OSError, ValueError) as e:
        raise VerdictInputError(f"{folder}: not a finished spectrum-rft eval folder ({e})") from None
    if len(summary.get("models") or {}) != 1:
        raise VerdictInputError(f"{folder}: holds {len(summary.get('models') or {})} models; give one eval folder per "
                                "checkpoint")
    if summary.get("memory_mode") != REAL_ECHO:
        raise VerdictInputError(f"{folder}: memory mode {summary.get('memory_mode')!r}; the rule plays scaffold episodes "
                                "(the model's own echo)")
    bands: dict[str, dict] = {}
    for line in lines:
        if not line.strip():
            continue
        row = json.loads(line)
        rec = _env_record(row)
        rid = (row.get("input_metadata") or {}).get("row_id")
        n = int(rec.get("n_scans") or len(rec.get("per_scan_reward") or []) or 0)
        skipped = int(rec.get("scans_skipped", n))
        bands[str(rid)] = {"fingerprint": rec.get("band_fingerprint"), METRIC: float(rec.get(METRIC) or 0.0),
                           **{k: rec.get(k) for k in SECONDARY}, "scans": n, "reported": n - skipped}
    return {"name": str(folder), "bands": bands}


def reported_share(episodes: dict) -> float:
    scans = sum(b["scans"] for b in episodes["bands"].values())
    return sum(b["reported"] for b in episodes["bands"].values()) / scans if scans else 0.0


def bootstrap_se(per_band: Sequence[float] | np.ndarray, n: int = BOOTSTRAP, seed: int = BOOTSTRAP_SEED) -> float:
    """The SE of the mean over bands: the sd of the means of ``n`` resamples of the bands, with replacement."""
    x = np.asarray(per_band, dtype=float)
    if x.size < 2:
        return float("nan")
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n, x.size))
    return float(x[idx].mean(axis=1).std(ddof=1))


def _common_bands(all_eps: list[dict]) -> list[str]:
    sets = [set(e["bands"]) for e in all_eps]
    common = set.intersection(*sets)
    for e, s in zip(all_eps, sets):
        if s != common:
            raise VerdictInputError(f"{e['name']}: its bands differ from the others' ({len(s ^ common)} not shared); "
                                    "every checkpoint plays the same held-out bands")
    return sorted(common)


def check_unseen(episodes: dict, seen: set[str]) -> None:
    """Refuse (one line) held-out bands whose fingerprints a training or SFT rollout played."""
    hit = sorted(b for b, v in episodes["bands"].items() if v["fingerprint"] in seen)
    if hit:
        raise VerdictInputError(f"{episodes['name']}: {len(hit)} held-out band(s) were played in training or SFT "
                                f"({', '.join(hit[:3])}{' ...' if len(hit) > 3 else ''}): draw them with another salt")


def seen_fingerprints(paths: Sequence[str | Path]) -> set[str]:
    """The band fingerprints of training runs (a run folder's ``rollouts.jsonl``, or the file itself), of SFT runs
    (a folder's ``bands.jsonl``) and of dataset files (rows with ``environment_context``: each row's band is
    rebuilt by its seed rule)."""
    from spectrum_rft.task.environment import env_for_row  # noqa: PLC0415

    seen: set[str] = set()
    for p in map(Path, paths):
        f = (p / "rollouts.jsonl" if (p / "rollouts.jsonl").is_file() or not (p / "bands.jsonl").is_file()
             else p / "bands.jsonl") if p.is_dir() else p
        try:
            lines = f.read_text().splitlines()
        except OSError as e:
            raise VerdictInputError(f"{p}: cannot read ({e.strerror or e})") from None
        for line in lines:
            if not line.strip():
                continue
            d = json.loads(line)
            if d.get("band_fingerprint"):
                seen.add(d["band_fingerprint"])
            elif "environment_context" in d:
                env, seed = env_for_row(d["id"], {"environment_context": d["environment_context"]})
                env.reset(seed)
                seen.add(env.metrics()["band_fingerprint"])
    return seen


def whole_verdict(warm: dict, real: dict[int, dict], control: dict[int, dict]) -> dict:
    """The rule (module docstring) over loaded episodes; every number it used is in the result."""
    names = [("warm start", warm), *[(f"real s{k}", v) for k, v in sorted(real.items())],
             *[(f"control s{k}", v) for k, v in sorted(control.items())]]
    bands = _common_bands([e for _, e in names])
    reported = {name: reported_share(e) for name, e in names}

    def at(e: dict, metric: str = METRIC) -> np.ndarray:
        return np.array([e["bands"][b][metric] for b in bands], dtype=float)

    u_b = np.mean([at(r) for r in real.values()], axis=0) - at(warm) if real else np.array([])
    d_b = (np.mean([at(r) for r in real.values()], axis=0) - np.mean([at(c) for c in control.values()], axis=0)
           if real and control else np.array([]))
    out: dict[str, Any] = {
        "rule": "LEARNED if u > 2 SE(u), d > 2 SE(d) and every real checkpoint reports >= 95 % of its scans; NOT "
                "LEARNED if u <= 2 SE(u) and every checkpoint reports >= 95 %; else INCONCLUSIVE (SE: bootstrap over "
                "bands, seeds kept together)",
        "metric": METRIC, "bands": len(bands), "seeds": {"real": sorted(real), "control": sorted(control)},
        "reported": reported, "per_band": {"u": u_b.round(6).tolist(), "d": d_b.round(6).tolist()},
        "means": {name: {m: (float(np.mean([v for v in at(e, m) if v == v])) if len(bands) else None)
                         for m in (METRIC, *SECONDARY)} for name, e in names},
    }
    if len(bands) < MIN_BANDS or len(real) < MIN_SEEDS or len(control) < MIN_SEEDS:
        if len(bands) >= 2 and real:  # the numbers so far, labelled provisional: never a verdict
            out["provisional"] = {"u": float(u_b.mean()), "se_u": bootstrap_se(u_b)}
            if control:
                out["provisional"].update(d=float(d_b.mean()), se_d=bootstrap_se(d_b))
        return {**out, "verdict": "inconclusive",
                "why": f"needs >= {MIN_BANDS} bands and >= {MIN_SEEDS} seeds per arm (have {len(bands)} bands, "
                       f"{len(real)} real and {len(control)} control seeds)"}
    u, d = float(u_b.mean()), float(d_b.mean())
    se_u, se_d = bootstrap_se(u_b), bootstrap_se(d_b)
    real_ok = all(reported[f"real s{k}"] >= MIN_REPORTED for k in real)
    all_ok = real_ok and all(reported[f"control s{k}"] >= MIN_REPORTED for k in control)
    out.update(u=u, se_u=se_u, d=d, se_d=se_d, real_reported_ok=real_ok, all_reported_ok=all_ok)
    if u > 2 * se_u and d > 2 * se_d and real_ok:
        v, why = "learned", f"u = {u:+.4f} > 2 SE = {2 * se_u:.4f}, d = {d:+.4f} > 2 SE = {2 * se_d:.4f}, every real " \
                            "checkpoint reports >= 95 %"
    elif u <= 2 * se_u and all_ok:
        v, why = "not learned", f"u = {u:+.4f} <= 2 SE = {2 * se_u:.4f}, every checkpoint reports >= 95 %"
    else:
        v, why = "inconclusive", (f"u = {u:+.4f} (2 SE {2 * se_u:.4f}), d = {d:+.4f} (2 SE {2 * se_d:.4f}); real "
                                  f"checkpoints report >= 95 %: {real_ok}, all: {all_ok}")
    return {**out, "verdict": v, "why": why}


def power_check(warm: dict, perfect: dict) -> dict:
    """What the rule can detect on these bands, before any run (issue 40 item 5). ``warm``: the warm start's whole
    episodes; ``perfect``: perfect use of the echo on the same bands (the ``accumulate`` policy through the same
    evaluator); ``allowed`` = the mean over bands of perfect - warm.

    The model: a checkpoint that realises a share f of perfect use gains u_b = f (perfect_b - warm_b) + e_b on band
    b, with e_b the band-level noise of a second model's episodes, of the warm start's band-to-band SD (sd_w) and
    independent of it. So SD(u_b)^2 = f^2 sd_pw^2 + 2 sd_w^2 (sd_pw: the band-to-band SD of perfect - warm) and
    SE(u) = SD(u_b) / sqrt(bands); the rule finds u > 2 SE four times in five when f allowed >= (2 + Z_POWER) SE.
    ``detectable_share`` is the smallest such f, ``detectable_u`` = f allowed, ``bands_for_a_tenth`` the bands
    f = 0.1 needs. Seed-to-seed noise of the checkpoints is not in it (nothing has been trained yet): averaging
    the seeds shrinks it; the band terms only more bands shrink."""
    bands = _common_bands([warm, perfect])
    w = np.array([warm["bands"][b][METRIC] for b in bands], dtype=float)
    p = np.array([perfect["bands"][b][METRIC] for b in bands], dtype=float)
    if len(bands) < 2:
        raise VerdictInputError(f"{warm['name']}: {len(bands)} band(s); a band-to-band SD needs at least 2")
    n, z = len(bands), 2 + Z_POWER
    sd_w, sd_pw, allowed = float(w.std(ddof=1)), float((p - w).std(ddof=1)), float((p - w).mean())
    room = allowed ** 2 - z ** 2 * sd_pw ** 2 / n  # > 0: perfect use itself is found on these bands
    share = z * np.sqrt(2 / n) * sd_w / np.sqrt(room) if allowed > 0 and room > 0 else None
    return {"bands": n, "metric": METRIC, "warm_mean": float(w.mean()), "warm_sd": sd_w, "perfect_sd": sd_pw,
            "allowed": allowed, "detectable_share": float(share) if share is not None else None,
            "detectable_u": float(share * allowed) if share is not None else None,
            "se_u_at_share": float(np.sqrt((share * sd_pw) ** 2 + 2 * sd_w ** 2) / np.sqrt(n)) if share is not None else None,
            "bands_for_a_tenth": (int(np.ceil(z ** 2 * (2 * sd_w ** 2 + 0.01 * sd_pw ** 2) / (0.01 * allowed ** 2)))
                                  if allowed > 0 else None)}


def format_power(pc: dict) -> list[str]:
    lines = [f"power check (before any run): {pc['bands']} bands; warm start {pc['metric']} {pc['warm_mean']:+.4f} "
             f"(band-to-band SD {pc['warm_sd']:.4f}); perfect use earns {pc['allowed']:+.4f} over it (SD {pc['perfect_sd']:.4f})"]
    if pc["detectable_share"] is None:
        lines.append("  the rule cannot find even perfect use on these bands: more bands")
        return lines
    lines += [f"  a checkpoint realising a share f of perfect use is found (u > 2 SE, 80 % power) from f = "
              f"{pc['detectable_share']:.3f}: u >= {pc['detectable_u']:.4f} (SE {pc['se_u_at_share']:.4f}); "
              f"f = 0.1 needs ~{pc['bands_for_a_tenth']} bands",
              "  (seed-to-seed noise not counted: unknown before any run; the seeds' mean shrinks it)"]
    return lines


def by_seed(specs: Sequence[str], flag: str, load: Callable[[str], dict], example: str) -> dict[int, dict]:
    """``SEED=PATH`` arguments (``0=...`` or ``s0=...``) -> {seed: load(PATH)}; one line for a malformed one."""
    out = {}
    for spec in specs:
        seed, sep, path = spec.partition("=")
        if not sep or not seed.lstrip("s").isdigit():
            raise VerdictInputError(f"{flag} expects SEED=PATH (e.g. {example}), got {spec!r}")
        out[int(seed.lstrip("s"))] = load(path)
    return out


def judge(warm: str, real: Sequence[str], control: Sequence[str], exclude: Sequence[str] = ()) -> dict:
    """``memory-report --whole-*``: load the folders, check the bands unseen, apply the rule."""
    w = load_episodes(warm)
    r = by_seed(real, "--whole-real", load_episodes, "0=runs/whole/real-s0")
    c = by_seed(control, "--whole-control", load_episodes, "0=runs/whole/control-s0")
    seen = seen_fingerprints(exclude)
    for e in (w, *r.values(), *c.values()):
        check_unseen(e, seen)
    return {**whole_verdict(w, r, c), "unseen_checked_against": len(seen)}


def format_verdict(v: dict) -> list[str]:
    """The verdict and every number it used, as printed lines."""
    lines = [f"whole-episode rule (pre-registered, issue 40): {v['rule']}",
             f"  {v['bands']} held-out bands; seeds real {v['seeds']['real']}, control {v['seeds']['control']}; "
             f"fingerprints checked against {v.get('unseen_checked_against', 0)} played in training/SFT"]
    for name, m in v["means"].items():
        lines.append(f"  {name:<14} reported {v['reported'][name]:.3f}   " +
                     "   ".join(f"{k} {m[k]:+.4f}" if m[k] is not None else f"{k} n/a" for k in m))
    if "u" in v:
        lines.append(f"  u = {v['u']:+.4f} (SE {v['se_u']:.4f})   d = {v['d']:+.4f} (SE {v['se_d']:.4f})")
    elif "provisional" in v:
        p = v["provisional"]
        lines.append(f"  provisional, not the rule's (fewer seeds or bands than it needs): u = {p['u']:+.4f} (SE "
                     f"{p['se_u']:.4f})" + (f"   d = {p['d']:+.4f} (SE {p['se_d']:.4f})" if "d" in p else ""))
    lines.append(f"  verdict: {v['verdict'].upper()} ({v['why']})")
    return lines
