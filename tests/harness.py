"""What the rollout-path tests share: a row logger that keeps nothing (eval-protocol's sqlite logger is slow
and global), the fixtures live in conftest.py (a real MCP server, a loopback model)."""

from __future__ import annotations

from eval_protocol.dataset_logger.dataset_logger import DatasetLogger


class NullLogger(DatasetLogger):
    def log(self, row):
        return None

    def read(self, rollout_id=None):
        return []
