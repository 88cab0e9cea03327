"""A chat template that renders tool calls, for models whose own cannot (SmolLM2-135M-Instruct).

SmolLM2's template writes an assistant message's ``content`` only, so a tool call vanishes from the
conversation and TRL refuses it ("does not support tool calling"). SmolLM2 is a chatml model
(``<|im_start|>``/``<|im_end|>``), so the Qwen2.5 chatml template, which lists the tools in the system
message and writes calls as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, fits its tokens.
We use TRL's public copy (``trl.chat_template_utils.qwen2_5_chat_template``) unchanged: TRL then also knows
how to parse the model's replies back into tool calls (``add_response_schema``), and SFTTrainer knows its
training twin (assistant-only loss). The template is saved with every checkpoint we write, so the
evaluator's server (``spectrum-rft serve-hf``) renders and parses exactly as training did.
"""

from __future__ import annotations

from typing import Any


def renders_tool_calls(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template writes an assistant tool call into the text."""
    if not getattr(tokenizer, "chat_template", None):
        return False
    probe = [{"role": "user", "content": "x"},
             {"role": "assistant", "content": "",
              "tool_calls": [{"type": "function", "function": {"name": "probe_tool_7", "arguments": {"a": 1}}}]}]
    try:
        text = tokenizer.apply_chat_template(probe, tokenize=False)
    except Exception:  # noqa: BLE001 (a template that cannot render the probe cannot render tool calls)
        return False
    return "probe_tool_7" in text


def with_tool_template(tokenizer: Any) -> Any:
    """The tokenizer, given TRL's chatml tool template when its own cannot render tool calls, and the
    response parser TRL uses to read tool calls back (``tokenizer.parse_response``)."""
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template  # noqa: PLC0415

    if not renders_tool_calls(tokenizer):
        if "<|im_start|>" not in tokenizer.get_vocab():
            raise ValueError("the model's chat template cannot render tool calls and the model is not a chatml "
                             "model; give it a tool-calling chat template (tokenizer.chat_template)")
        tokenizer.chat_template = qwen2_5_chat_template
    try:
        add_response_schema(tokenizer)
    except ValueError:
        if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
            raise
    return tokenizer
