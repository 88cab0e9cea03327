"""How the rollout transports recognise and serve the scripted baselines as models (stdlib only, cheap to
import): the ``spectrum/<policy>`` model names, and the row every call of such a model carries in litellm's
``metadata`` (the privileged oracle rebuilds its env from it; no other model ever gets it)."""

from __future__ import annotations

SCRIPTED_MODEL_PREFIX = "spectrum/"  # the scripted baselines served as litellm models (their handler: baselines)
ROW_METADATA_KEY = "spectrum_row"  # litellm ``metadata`` key carrying the row of a scripted-model call


def is_scripted_model(model: object) -> bool:
    return isinstance(model, str) and model.startswith(SCRIPTED_MODEL_PREFIX)


def row_metadata(row_id: str, dataset_info: dict | None) -> dict:
    """The litellm ``metadata`` of every call of a scripted model: the row it plays."""
    return {ROW_METADATA_KEY: {"row_id": row_id, "dataset_info": dataset_info}}
