"""The held-out evaluation dataset of a launch: fresh bands the job scores while it trains and never trains on.

How its rows are told apart from training rows, everywhere they travel (the uploaded dataset, the rows the
job's evaluator scores, what ``spectrum-rft report`` reads):

* ``environment_context["split"] == "heldout"`` (:data:`~spectrum_rft.rollouts.dataset.SPLIT_KEY`,
  :data:`~spectrum_rft.rollouts.dataset.HELDOUT`): the marker report reads (``rollouts.dataset.is_heldout``: a
  row's marker, so report reads it without loading launch). The env ignores keys it does not know, so the
  evaluator plays the row as any other.
* row ids ``<prefix>-heldout-rNNNN`` (:func:`heldout_prefix`): for a person reading the job's logs.
* no ``environment_context["epoch"]``: the same held-out rows are scored at every evaluation pass, so no
  epoch belongs to the row; report places each scored held-out rollout at the training epoch in progress
  when it was scored (its ``created_at`` against the training rows': docs/LAUNCH.md).
* a salt of their own (:func:`default_eval_salt`), and fingerprints checked disjoint from every training row's
  (:func:`shared_bands`): a held-out band is never one the model trained on.
"""

from __future__ import annotations

from typing import Iterable

from spectrum_rft.rollouts.dataset import HELDOUT, SPLIT_KEY


def heldout_prefix(prefix: str) -> str:
    return f"{prefix}-{HELDOUT}"


def default_eval_salt(salt: str) -> str:
    """The held-out rows' salt: never the training salt (and never ``process``: see the options' checks)."""
    return f"{HELDOUT}:{salt}" if salt else HELDOUT


def heldout_rows(n: int, *, prompt: str, memory_mode: str, preset: str, reward: str, think: bool, salt: str,
                 prefix: str) -> list[dict]:
    """``n`` held-out rows as EvaluationRow JSON: the arm's prompt and memory mode, the training rows' preset,
    reward and think flag, the held-out salt and prefix, the split marker and no epoch."""
    from spectrum_rft.rollouts import dataset as msd  # noqa: PLC0415

    out = []
    for raw in msd.make_rows(n, prompt=prompt, memory_mode=memory_mode, preset=preset, reward=reward, think=think,
                             epochs=1, salt=salt, prefix=heldout_prefix(prefix)):
        ctx = dict(raw["environment_context"])
        ctx.pop("epoch", None)
        ctx[SPLIT_KEY] = HELDOUT
        out.append(msd.to_evaluation_row_dict({**raw, "environment_context": ctx}))
    return out


def band_fingerprints(rows: Iterable[dict]) -> dict[str, str]:
    """Row id -> the band fingerprint the env reports for the row (what ``report`` compares), EvaluationRow
    JSON rows; the env is reset with the row's seed, nothing is played."""
    from spectrum_rft.task.environment import env_for_row  # noqa: PLC0415

    out = {}
    for r in rows:
        meta = r["input_metadata"]
        env, seed = env_for_row(meta["row_id"], meta["dataset_info"])
        env.reset(seed)
        out[meta["row_id"]] = env.metrics()["band_fingerprint"]
    return out


def shared_bands(training: dict[str, str], heldout: dict[str, str]) -> list[tuple[str, str]]:
    """(held-out row id, training row id) pairs that play the same band: must be none."""
    by_fp = {fp: rid for rid, fp in training.items()}
    return [(rid, by_fp[fp]) for rid, fp in heldout.items() if fp in by_fp]


def check_disjoint(training: list[dict], heldout: list[dict]) -> None:
    """Refuse (:class:`~spectrum_rft.tools.launch.options.LaunchError`, one line) held-out rows that play a
    training row's band."""
    from .options import LaunchError  # noqa: PLC0415

    shared = shared_bands(band_fingerprints(training), band_fingerprints(heldout))
    if shared:
        raise LaunchError(f"{len(shared)} held-out row(s) play a training row's band (e.g. {shared[0][0]} = "
                          f"{shared[0][1]}): choose another --eval-salt")
