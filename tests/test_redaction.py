"""Keys in completion params (``spectrum_rft.common.redaction``): by reference there and back, and never
left in what is written. Property tests over nested params with credential names at any depth."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spectrum_rft.common.redaction import (REDACTED, is_secret_name, redact_params, resolve_env_refs,
                                           secrets_by_reference)

SECRET_NAMES = ["api_key", "apiKey", "API-KEY", "token", "x_api_token", "Authorization", "client_secret",
                "password", "aws_credentials"]
PLAIN_NAMES = ["model", "temperature", "max_tokens", "api_base", "tool_choice", "keyword", "tokens_budget",
               "monkey", "extra_body"]
values = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=8, max_size=24).map(lambda s: "sk-" + s)
plain = st.dictionaries(st.sampled_from(PLAIN_NAMES), st.one_of(st.integers(), st.text(alphabet="xyz", max_size=5)),
                        max_size=3)
params = st.recursive(  # credential values only under credential names, folders of params at any depth
    plain,
    lambda inner: st.tuples(plain, st.dictionaries(st.sampled_from(PLAIN_NAMES), inner, max_size=2),
                            st.dictionaries(st.sampled_from(SECRET_NAMES), st.one_of(values, inner), max_size=3))
    .map(lambda t: {**t[0], **t[1], **t[2]}),
    max_leaves=10)


def _secret_values(d, out=None):
    out = [] if out is None else out
    for k, v in d.items():
        if isinstance(v, dict):
            _secret_values(v, out)
        elif is_secret_name(k) and isinstance(v, str) and v:
            out.append(v)
    return out


def _secret_names_with_values(d):
    return any((is_secret_name(k) and v is not None and not isinstance(v, dict))
               or (isinstance(v, dict) and _secret_names_with_values(v)) for k, v in d.items())


def test_names():
    assert all(is_secret_name(n) for n in SECRET_NAMES)
    assert not any(is_secret_name(n) for n in PLAIN_NAMES)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)  # the machine's speed is no property
@given(params)
def test_redacted_params_hold_no_credential_value(p):
    text = json.dumps(redact_params(p))
    for v in _secret_values(p):
        assert v not in text
    if not _secret_names_with_values(p):
        assert redact_params(p) == p  # nothing else changes


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)  # the machine's speed is no property
@given(params)
def test_by_reference_and_back_is_the_same_params(p):
    refs, env = secrets_by_reference(p, "SPECTRUM_EVAL_SECRET")
    text = json.dumps(refs)
    for v in _secret_values(p):
        assert v not in text
    assert sorted(env.values()) == sorted(_secret_values(p))
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        assert resolve_env_refs(refs) == p
    assert redact_params(refs) == refs  # a reference names a variable, not a value: kept in what is written


def test_an_unset_variable_is_one_line(monkeypatch):
    monkeypatch.delenv("SPECTRUM_EVAL_SECRET_NOPE", raising=False)
    with pytest.raises(ValueError, match="names the environment variable SPECTRUM_EVAL_SECRET_NOPE, which is not set"):
        resolve_env_refs({"api_key": {"$env": "SPECTRUM_EVAL_SECRET_NOPE"}})
    assert redact_params({"api_key": "sk-1", "n": [{"token": "t"}]}) == {"api_key": REDACTED, "n": [{"token": REDACTED}]}
