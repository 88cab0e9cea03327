"""Dataset rows -> episodes: the one place every rollout path reads a row's env config and band seed."""

from __future__ import annotations

from typing import Any

from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.presets import get_preset
from spectrum_rft.task.seeding import resolve_salt, seed_for_row


def _row_context(dataset_info: dict[str, Any] | None) -> dict[str, Any]:
    """The env settings a row carries: ``dataset_info["environment_context"]``, or the top level."""
    info = dataset_info or {}
    ctx = info.get("environment_context")
    return ctx if isinstance(ctx, dict) else info


def row_config(dataset_info: dict[str, Any] | None) -> EnvConfig:
    """The env config a dataset row carries (``dataset_info["environment_context"]``, or the top level)."""
    return EnvConfig.from_dict(_row_context(dataset_info))


def row_seed(row_id: str, config: EnvConfig) -> int:
    """The band seed of a row: ``seed_for_row(row_id, salt)`` with a ``process`` salt resolved here."""
    return seed_for_row(row_id, resolve_salt(config.salt))


def row_episode(row_id: str, dataset_info: dict[str, Any] | None) -> tuple[EnvConfig, int]:
    """The env config and band seed of one rollout of a row (both rollout paths).

    The seed is the row's explicit ``environment_context["seed"]`` when it carries one (the dataset
    generator writes ``seed_for_row(row_id, salt)`` there; 0 is a valid seed), else it is derived here
    from the row id and salt (a ``process`` salt is resolved once per process). Presets whose seed is a
    run index of a fixed schedule (``seed_is_run_index``, e.g. bench90) require the explicit seed.
    """
    cfg = row_config(dataset_info)
    explicit = _row_context(dataset_info).get("seed")
    if cfg.salt == "process":  # a per-process band: any stored seed is ignored
        cfg = EnvConfig(**{**cfg.to_dict(), "salt": resolve_salt("process")})
    elif isinstance(explicit, int) and not isinstance(explicit, bool) and explicit >= 0:
        return cfg, explicit
    if get_preset(cfg.preset).seed_is_run_index:
        raise ValueError(f"row {row_id!r}: preset {cfg.preset!r} needs environment_context['seed'] = run index")
    return cfg, row_seed(row_id, cfg)
