"""Seeding: a dataset row's band seed. The one rule every path uses (GRPO candidates of a row share it)."""

from __future__ import annotations

import hashlib
import os
import time



def seed_for_row(row_id: str, salt: str = "") -> int:
    """Stable 63-bit seed for a dataset row: blake2b over (salt, row_id). Same in every process."""
    digest = hashlib.blake2b(f"{salt}\x1f{row_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & (2**63 - 1)


_PROCESS_SALT: str | None = None


def resolve_salt(salt: str) -> str:
    """``"process"`` means one fresh salt per Python process (the original experiment's epoch salting,
    kept for replication). Prefer ``make_spectrum_dataset.py --epochs K``: it is reproducible, while a
    process salt differs between processes, so GRPO candidates scored in different workers would see
    different bands. The salt actually used is reported in the metrics."""
    global _PROCESS_SALT
    if salt != "process":
        return salt
    if _PROCESS_SALT is None:
        _PROCESS_SALT = "p" + hashlib.blake2b(f"{os.getpid()}-{time.time_ns()}".encode(), digest_size=6).hexdigest()
    return _PROCESS_SALT
