"""What the spectrum MCP client and server agree on (the one definition both import).

One rollout = one MCP connection (streamable HTTP) = one env on the server:

* **Row.** The client's ``clientInfo`` (``Implementation(..., spectrum={"row_id", "dataset_info"})``, a
  pydantic extra field set through the public constructor) names the row; the server builds and seeds the
  env from it on first use (:func:`spectrum_rft.task.environment.env_for_row`, as in-process).
* **Opening.** Reading :data:`EPISODE_URI` returns the first scan, the row's system prompt and memory mode
  (JSON).
* **Tools.** ``tools/list`` answers each session with its row's tools (``SpectrumEnv.tools()``: the memory
  mode's tool set, the preset's schemas, unchanged), then :data:`PROTOCOL_TOOLS`; the client hands the model
  the row's tools from that listing.
* **Tool calls.** Each model tool call is ONE ``call_tool``: to the row's own tool when its arguments are a
  JSON object that tool's schema carries unchanged and small (:data:`INLINE_MAX_CHARS`); otherwise to :data:`RAW_TOOL` with the model's name and
  text as written (unknown tool names, malformed or non-object JSON, nulls, non-finite numbers, large
  arguments as base64, and arguments over the env's ``MAX_ARGUMENT_BYTES`` as their size only: mcp refuses
  requests over 4 MiB). The request ``_meta`` carries :data:`TURN_KEY` (``{"first", "last"}``: the call's
  place in the model's message, so the env's per-scan budget counts model calls) and :data:`FAULTS_KEY`
  (transport faults counted since the last request).
* **Other events** of the loop (a reply without tool calls, a scan skipped after failed model calls, the
  end) are one ``call_tool`` of :data:`EVENT_TOOL` each.
* **Answers.** The tool result's text is the env's text for the model, exactly; the result's ``_meta``
  [:data:`META_KEY`] carries the data: ``ok``, ``advanced``, ``reward``, ``error``, ``skipped``, ``scan``
  (0-based open scan), ``done``, ``prompt`` (the open scan's text, when the scan changed) and, once the
  episode is over, ``result`` (the env's metrics with ``scan_records``).
"""

from __future__ import annotations

META_KEY = "spectrum"  # key of our data in a tool result's ``_meta``
TURN_KEY = "spectrum/turn"  # request ``_meta``: {"first": bool, "last": bool}
FAULTS_KEY = "spectrum/faults"  # request ``_meta``: {fault kind: count} counted by the client since its last request
CLIENT_INFO_KEY = "spectrum"  # clientInfo extra field: {"row_id", "dataset_info"}
EPISODE_URI = "spectrum://episode"
RAW_TOOL = "model_tool_call"
EVENT_TOOL = "episode_event"
PROTOCOL_TOOLS = (RAW_TOOL, EVENT_TOOL)  # listed to every session after its row's own tools
EVENTS = ("no_tool_call", "skip", "finish")
INLINE_MAX_CHARS = 256 * 1024  # larger arguments travel as base64 (bounded growth whatever their escaping)
