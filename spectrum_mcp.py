"""The McpGym server of the task (the design card's entry point; the code is
:mod:`spectrum_rft.rollouts.mcp_server`)."""

from spectrum_rft.rollouts.mcp_server import SpectrumMcpAdapter, SpectrumMcp

__all__ = ["SpectrumMcpAdapter", "SpectrumMcp"]
