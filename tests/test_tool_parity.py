"""Every transport offers the model the same tools, byte for byte: for each memory mode and each preset a
row can play, the in-process path's opening, the MCP server's per-session ``tools/list`` (a real server over
HTTP, through our client) and the env's own ``tool_schemas()`` serialise identically, and the MCP session lists
the row's tools alone (its mode's set) before the protocol's own. The TRL adapter declares the same tool set
(its rendering, ``get_json_schema``, is held to the env's schemas in ``test_trl_env``); the OpenEnv server and
its TRL class are held to the same in ``environments/spectrum_openenv/tests``, the verifiers harness in
``environments/spectrum_memory/tests``."""

from __future__ import annotations

import asyncio
import json

import pytest

from spectrum_rft.rollouts.episode import InProcessEpisode
from spectrum_rft.rollouts.mcp_client import _mcp_streams, mcp_episode
from spectrum_rft.rollouts.mcp_protocol import PROTOCOL_TOOLS
from spectrum_rft.task.config import EnvConfig
from spectrum_rft.task.instructions import tool_schemas
from spectrum_rft.task.memory import MEMORY_MODES, memory_mode
from spectrum_rft.task.presets import PRESET_NAMES


PRESETS = PRESET_NAMES  # bench90's included: its reports carry widths (its rows pin the seed, as bench90's do)


def _row(mode: str, preset: str):
    from eval_protocol.models import EvaluationRow

    ctx = {**EnvConfig(preset=preset, memory_mode=mode).to_dict(), "seed": 0}
    return EvaluationRow.model_validate({"messages": [], "input_metadata": {
        "row_id": f"parity-{preset}-{mode}", "dataset_info": {"environment_context": ctx}}})


def _bytes(tools: list[dict]) -> str:
    return json.dumps(tools, sort_keys=False, separators=(",", ":"))


def test_the_parity_covers_every_tool_set_and_a_preset_whose_reports_carry_widths():
    assert {memory_mode(m).tool_set for m in MEMORY_MODES} == {"report", "notepad", "notepad_update"}
    assert any("bandwidths" in tool_schemas("scaffold", p)[0]["function"]["parameters"]["properties"]
               for p in PRESETS), PRESETS
    assert len({_bytes(tool_schemas(m, p)) for m in MEMORY_MODES for p in PRESETS}) >= 6


@pytest.mark.parametrize("preset", PRESETS)
def test_every_transport_offers_the_same_tools_for_every_mode(preset, mcp_server):
    rows = {mode: _row(mode, preset) for mode in MEMORY_MODES}

    async def over_mcp(row) -> tuple[list[dict], list[str]]:
        async with mcp_episode(mcp_server.base_url, row) as ep:
            opening = await ep.start()
            listed = [t.name for t in (await ep.session.list_tools()).tools]
        return opening.tools, listed

    async def in_process(row) -> list[dict]:
        return (await InProcessEpisode.for_row(row.input_metadata.row_id, row.input_metadata.dataset_info)
                .start()).tools

    for mode, row in rows.items():
        env_tools = tool_schemas(mode, preset)
        mcp_tools, listed = asyncio.run(over_mcp(row))
        here = asyncio.run(in_process(row))
        assert _bytes(here) == _bytes(env_tools), (mode, preset)
        assert _bytes(mcp_tools) == _bytes(env_tools), (mode, preset)
        names = [t["function"]["name"] for t in env_tools]
        assert listed == names + list(PROTOCOL_TOOLS), (mode, preset, listed)


def test_a_session_that_names_no_row_is_refused_its_tools_in_one_line(mcp_server):
    from mcp import ClientSession
    from mcp.shared.exceptions import McpError

    async def go() -> str:
        async with _mcp_streams(mcp_server.base_url) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                with pytest.raises(McpError) as e:
                    await session.list_tools()
                return str(e.value)

    msg = asyncio.run(go())
    assert "clientInfo must carry" in msg and "\n" not in msg


@pytest.mark.parametrize("mode", MEMORY_MODES)
def test_the_trl_adapter_declares_the_modes_tool_set(mode):
    from spectrum_rft.training.spectrum.trl_env import tool_env_class, tool_names

    for preset in PRESETS:
        declared = sorted(tool_names(tool_env_class(mode, preset)))
        assert declared == sorted(t["function"]["name"] for t in tool_schemas(mode, preset)), (mode, preset)
