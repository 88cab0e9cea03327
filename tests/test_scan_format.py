"""The scan text format (spectrum_rft/task/scan_format.py): one module renders and parses it; the rendered
text is pinned; parsing inverts rendering; no other package module matches on the format."""

from __future__ import annotations

import ast
import hashlib
import math
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from spectrum_rft.task import scan_format as sf
from spectrum_rft.task.environment import (MEMORY_MODES, PROMPT_VARIANTS, EnvConfig, SpectrumEnv,
                                           render_system_prompt)
from spectrum_rft.task.episode import EpisodeDraw, Peak, Scan

PKG = Path(__file__).resolve().parent.parent / "spectrum_rft"

# ---- rendering: byte-identical to the text the scores and eval figures were measured on -----------------


def corpus(presets=(("seed", 3), ("default-v1", 1), ("bench90", 1)), reward: str = "occ_iou") -> list[str]:
    """System prompts, every scan of one episode per preset and memory mode (echo, notepad), the
    acknowledgements and the final observation."""
    out = []
    for preset, seed in presets:
        for mode in MEMORY_MODES:
            out += [render_system_prompt(EnvConfig(preset=preset, memory_mode=mode, prompt=p, think=t, reward=reward))
                    for p in PROMPT_VARIANTS for t in (False, True)]
            env = SpectrumEnv(EnvConfig(preset=preset, memory_mode=mode, reward=reward))
            obs, _ = env.reset(seed)
            truth = [c for c, _ in env.truth()]
            k = 0
            while not obs["done"]:
                out.append(obs["prompt"])
                args = {"center_freqs": truth[: k % 6]}
                if mode == "icl_notepad":
                    args["notepad_update"] = ["", "a, 1.5\nsecond line", "(empty)"][k % 3]
                out.append(env.call_tool("submit_report", args, first=True, last=True).content)
                obs = env.observation()
                k += 1
            out.append(obs["prompt"])
    return out


def test_rendered_text_is_unchanged():
    """The digest of the texts rendered before the format moved into scan_format (commit fe9dceb), with the
    reward of that time (occ_iou; the 480 MHz default is ``default-v1`` now)."""
    digest = hashlib.sha256("\x00".join(corpus()).encode()).hexdigest()
    assert digest == "fb420e698b49bebb4b890b60453ef9d25c7d606a738aee386da95dd06c6461e5"


def test_rendered_text_of_the_default_is_pinned():
    """The default (``default-v2``, 720 MHz, ``match_iou``: its system prompt says how a report is scored)."""
    texts = corpus((("default", 1),), reward="default")
    assert "Each transmitter counts once" in texts[0] and "0.0-720.0 MHz" in texts[0]
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()
    assert digest == "6f087d94abf37f98960a3f968dec9b0efe865c2da060e00e8094ce5a05167cc1"


def test_env_scans_parse_back_to_the_episode():
    for preset, mode in (("default", "scaffold"), ("seed", "icl_notepad"), ("bench90", "scrambled")):
        env = SpectrumEnv(EnvConfig(preset=preset, memory_mode=mode))
        obs, _ = env.reset(2)
        ep = env.preset.episode(2)
        while not obs["done"]:
            i = env.scan_index
            p = sf.parse_scan(obs["prompt"])
            scan = ep.scans[i]
            assert (p.scan, p.n_scans, p.band, p.noise_floor) == (i + 1, env.n_scans, ep.band, ep.noise_floor)
            assert p.peaks == [(q.freq, q.power, q.width) for q in scan.peaks]
            assert p.peak_ids == [q.id for q in scan.peaks] and p.note == scan.note
            assert p.max_regions == env.preset.max_regions
            assert (p.echo is None) == (mode == "icl_notepad" or i == 0)
            assert (p.notepad is None) == (mode != "icl_notepad")
            res = env.call_tool("submit_report", {"center_freqs": [ep.band[0] + 10.5, ep.band[0] + 20.0],
                                                  "notepad_update": f"seen {i}\n(line)"}, first=True, last=True)
            assert sf.is_scan_recorded(res.content) and not sf.is_scan_text(res.content)
            obs = env.observation()
            nxt = sf.parse_scan(obs["prompt"])
            if nxt is not None and mode == "scaffold":
                assert nxt.echo == [ep.band[0] + 10.5, ep.band[0] + 20.0]
            if nxt is not None and mode == "icl_notepad":
                assert nxt.notepad == f"seen {i}\n(line)"
        assert sf.is_scan_recorded(obs["prompt"]) and sf.parse_scan(obs["prompt"]) is None


def test_acknowledgements_and_non_scans():
    assert sf.render_feedback(3, 12, False) == "Scan 3 recorded."
    assert sf.render_feedback(12, 12, True) == "Scan 12 recorded. Monitoring complete: all 12 scans recorded."
    assert sf.render_complete(12) == "Monitoring complete: all 12 scans recorded."
    for text in ("Scan 3 recorded.", "Scan 1 recorded. (notepad not updated: too long)",
                 "Scan 2 recorded.\n\nScan 3/12 | band 0.0-180.0 MHz | noise floor -50.0 dBm\nNo peaks detected."):
        assert sf.is_scan_recorded(text)
    for text in ("", "recorded", "Error: all scans are recorded; this call was ignored.", "Notepad saved (3/2000).",
                 "my notes: Scan 3 recorded.", "Scan 3/12 | band 0.0-180.0 MHz | noise floor -50.0 dBm"):
        assert not sf.is_scan_recorded(text)
    assert sf.parse_scan("hello") is None and not sf.is_scan_text("Scan 3 recorded.")
    mcp = "Scan 2 recorded.\n\nScan 3/12 | band 0.0-180.0 MHz | noise floor -50.0 dBm\nNo peaks detected.\n" \
          "Call submit_report with the centre frequencies of all occupied regions (at most 16)."
    p = sf.parse_scan(mcp)
    assert (p.scan, p.peaks, p.echo, p.notepad, p.max_regions) == (3, [], None, None, 16)


# ---- parsing inverts rendering ---------------------------------------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False)
tenths = st.integers(-10**6, 10**6).map(lambda k: k / 10)  # what the ``mhz`` filter prints exactly
# a header note (a preset's stage name): one line, without the body separator of render_bodies
line = st.text(st.characters(blacklist_characters="\n\x1e", blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=150, deadline=None)
@given(n_scans=st.integers(1, 5), data=st.data(), lo=tenths, hi=tenths, floor=tenths, note=line,
       peaks=st.lists(st.tuples(st.integers(0, 999), finite, finite, finite), max_size=6),
       echo=st.none() | st.lists(finite, max_size=8),
       notepad=st.none() | st.text(st.characters(blacklist_categories=("Cs",)), max_size=60),
       cap=st.integers(1, 500))
def test_parse_inverts_render(n_scans, data, lo, hi, floor, note, peaks, echo, notepad, cap):
    k = data.draw(st.integers(0, n_scans - 1))
    scans = [Scan([], (), ()) for _ in range(n_scans)]
    scans[k] = Scan([Peak(f"P{i}", f, p, w) for i, f, p, w in peaks], (), (), note=note.strip())
    bodies = sf.render_bodies(EpisodeDraw((lo, hi), [], scans, floor))
    text = sf.render_scan(bodies[k], echo, notepad, cap)
    assert sf.is_scan_text(text) and not sf.is_scan_recorded(text)
    p = sf.parse_scan(text)
    assert (p.scan, p.n_scans, p.band, p.noise_floor, p.note) == (k + 1, n_scans, (lo, hi), floor, note.strip())
    assert p.peaks == [(f, pw, w) for _, f, pw, w in peaks] and p.peak_ids == [f"P{i}" for i, *_ in peaks]
    assert p.echo == echo and p.max_regions == cap
    if notepad is None or notepad != "(empty)":  # "(empty)" is how an empty notepad is shown
        assert p.notepad == notepad
    assert all(math.isfinite(x) for t in p.peaks for x in t)
    # behind an acknowledgement (the MCP path) it reads the same
    assert sf.parse_scan(sf.render_feedback(k, n_scans, False) + "\n\n" + text) == p


# ---- one reader: no other module matches on the format -------------------------------------------------

TOKENS = ("Scan ", "recorded", "Your notepad", "Your previous report", "peaks detected", "peak detected",
          "No peaks", "at most", "| band", "noise floor", "Monitoring complete", "Call submit_report")
OLD_NAMES = ("SCAN_HEADER", "_KEY_LINE", "_TRUTH", "register_truth", "lookup_truth", "scan_key", "_NOTEPAD",
             "_ECHO", "_HEADER", "_PEAK", "_CAP")
MATCHERS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split",
            "startswith", "endswith", "find", "rfind", "index", "rindex", "count", "partition", "rpartition",
            "removeprefix", "removesuffix"}


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def format_matches(path: Path) -> list[str]:
    """String matches on the scan text format in one file: a format token in a regex or string-method
    argument, or on either side of ``in`` / ``==``; and the names of the old parsers."""
    src = path.read_text()
    bad = [f"{path.name}: {name}" for name in OLD_NAMES
           if any(isinstance(n, ast.Name) and n.id == name or isinstance(n, ast.Attribute) and n.attr == name
                  for n in ast.walk(ast.parse(src)))]
    for node in ast.walk(ast.parse(src)):
        probes: list[ast.AST] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MATCHERS:
            probes = [*node.args, node.func.value]
        elif isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn, ast.Eq, ast.NotEq))
                                                  for o in node.ops):
            probes = [node.left, *node.comparators]
        hits = [s for p in probes for s in _strings(p) if any(t in s for t in TOKENS)]
        bad += [f"{path.name}:{node.lineno}: {s!r}" for s in hits]
    return bad


def test_only_scan_format_matches_on_the_format():
    owner = PKG / "task" / "scan_format.py"
    assert format_matches(owner)  # the checker sees the real parser
    bad = [b for f in sorted(PKG.rglob("*.py")) if f != owner for b in format_matches(f)]
    assert not bad, "scan text format matched outside spectrum_rft/task/scan_format.py:\n" + "\n".join(bad)


def test_the_checker_sees_the_old_patterns(tmp_path):
    probe = tmp_path / "m.py"
    probe.write_text('import re\nH = re.compile(r"^Scan (\\d+)/(\\d+) \\| band ", re.M)\n'
                     'def f(m):\n    return "recorded" in m["content"]\n'
                     'def g(t):\n    return t.startswith("Your notepad: ")\n'
                     'def h(t):\n    return SCAN_HEADER.search(t)\n')
    found = "\n".join(format_matches(probe))
    for needle in ("band", "'recorded'", "Your notepad", "SCAN_HEADER"):
        assert needle in found
