"""The measurement behind the `default` reward and preset (docs/ENVIRONMENT.md, "Reward audit"): the same transmitters on
bands of other widths, under each reward, attacked by the memory-free policies of the audit.

    python scripts/audit_alternatives.py [--episodes 500] [--bands 480,600,720,960] [--rewards occ_iou,match_iou]

Each band is the `default` preset with another width (everything else equal); a row is one audit
(`spectrum_rft.baselines.audit.audit`) on the same bands as `spectrum-rft audit`. Columns: memoryless and
accumulate scores, accumulate's ratio to memoryless, the best blind tiling's and the best padded
memoryless policy's ratios, and the largest paired gain any padding gives its base (+- its SE).
"""

from __future__ import annotations

import argparse
import dataclasses

from spectrum_rft.baselines.audit import audit, default_policies, policy_kind
from spectrum_rft.task import presets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--bands", default="480,600,720,960", help="band widths in MHz, comma-separated")
    ap.add_argument("--rewards", default="occ_iou,match_iou")
    a = ap.parse_args(argv)
    base = presets.get_preset("default")
    print("| band MHz | reward | memoryless | accumulate | accumulate x | best blind x | best padded x | "
          "largest padding gain (SE) |")
    print("|---|---|---|---|---|---|---|---|")
    for width in (float(b) for b in a.bands.split(",")):
        name = f"width-{width:g}"
        # a throw-away preset for this measurement only (this script's process)
        presets.PRESETS[name] = dataclasses.replace(base, name=name, band=(0.0, width))
        pols = default_policies(name)
        for reward in a.rewards.split(","):
            r = audit(name, reward, a.episodes, pols)
            p = r["policies"]
            ml = p["memoryless"]["score"]

            def best(kind: str, p: dict = p, ml: float = ml) -> str:
                k = max((n for n in p if policy_kind(n) == kind), key=lambda n: p[n]["score"])
                return f"{p[k]['score'] / ml:.2f} ({k})"

            pad = max(r["padding"].items(), key=lambda kv: kv[1]["diff"])
            print(f"| {width:g} | {reward} | {ml:.3f} | {p['accumulate']['score']:.3f} | "
                  f"{p['accumulate']['score'] / ml:.2f} | {best('blind')} | {best('padded')} | "
                  f"{pad[1]['diff']:+.4f} ({pad[1]['se']:.4f}) {pad[0]} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
