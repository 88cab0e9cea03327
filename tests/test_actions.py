"""The one tool-call argument parser (spectrum_rft.task.actions): what it decodes, what it refuses, and that
its refusal reads as the env's own."""

from __future__ import annotations

import pytest

from spectrum_rft.task.actions import InvalidArguments, is_blank, is_unparseable, parse_arguments
from spectrum_rft.task.environment import EnvConfig, SpectrumEnv

DEEP = "[" * 100_000 + "]" * 100_000


def test_text_is_decoded_and_objects_pass_through():
    assert parse_arguments('{"center_freqs": [41.5]}') == {"center_freqs": [41.5]}
    assert parse_arguments(b'{"text": "x"}') == {"text": "x"}
    obj = {"center_freqs": [1.0]}
    assert parse_arguments(obj) is obj and parse_arguments(None) is None


@pytest.mark.parametrize("bad", ["{not json", "", "   ", DEEP])
def test_text_that_is_not_json_is_refused_with_the_models_message(bad):
    with pytest.raises(InvalidArguments, match="^arguments are not valid JSON: "):
        parse_arguments(bad)


def test_blank_is_no_arguments_not_bad_ones():
    assert is_blank("  ") and is_blank(b"") and not is_blank("{}") and not is_blank(None)
    assert not is_unparseable("") and not is_unparseable("{}") and not is_unparseable({"a": 1})
    assert is_unparseable("{not json") and is_unparseable(DEEP)


def test_the_refusal_reads_as_the_envs():
    env = SpectrumEnv(EnvConfig())
    env.reset(seed=1)
    for bad in ("{not json", DEEP):
        res = env.call_tool("submit_report", bad)
        with pytest.raises(InvalidArguments) as e:
            parse_arguments(bad)
        assert not res.ok and res.error == str(e.value)


def test_serve_hf_reads_history_arguments_with_the_same_parser():
    """serve-hf hands the chat template objects: JSON decoded, blank as no arguments, junk kept visible."""
    from spectrum_rft.training.spectrum.serve import _messages

    def call(args):
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "submit_report", "arguments": args}}]}

    got = [m["tool_calls"][0]["function"]["arguments"] for m in _messages([call('{"center_freqs": [1.5]}'), call(" "),
                                                                           call("{not json"), call(DEEP)])]
    assert got == [{"center_freqs": [1.5]}, {}, {"_raw": "{not json"}, {"_raw": DEEP}]
