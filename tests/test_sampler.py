"""The GRPO sampler of scan episodes (spectrum_rft.training.spectrum.sampler): the tool-call grammar comes from the
env's own tool_schemas(), constrained completions always parse as a report (the env refusing only a list
one item past the cap), one prefill per group gives the same completions as separate prompts, the masked
learner is the policy that sampled, and a constrained GRPO step runs inside TRL's real GRPOTrainer with
every completion a tool call in rollouts.jsonl."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("trl")
pytest.importorskip("xgrammar")

from spectrum_rft.task.environment import tool_schemas  # noqa: E402
from spectrum_rft.training.spectrum import sampler as S  # noqa: E402


def test_call_schema_is_the_envs_tool_schema():
    tools = tool_schemas("scaffold")
    schema = S.tool_call_schema(tools, over_cap=0)
    args = schema["properties"]["arguments"]
    params = tools[0]["function"]["parameters"]
    assert schema["properties"]["name"] == {"const": "submit_report"}
    assert args["properties"] == params["properties"] and args["required"] == params["required"]
    assert args["properties"]["center_freqs"]["maxItems"] == 16
    assert args["properties"]["center_freqs"]["items"] == {"type": "number", "minimum": 0, "maximum": 720}
    assert "bandwidths" not in args["properties"]  # the fixed-width preset ignores it, so it is not offered
    both = S.tool_call_schema(tool_schemas("notepad"))
    assert sorted(c["properties"]["name"]["const"] for c in both["anyOf"]) == ["notepad_read", "notepad_write",
                                                                              "submit_report"]
    with pytest.raises(ValueError):
        S.tool_call_schema([])


@pytest.fixture(scope="module")
def smollm():
    from spectrum_rft.training.models import resolve_model_dir
    from spectrum_rft.training.trl_common import load_model, load_tokenizer

    model_dir, _ = resolve_model_dir("smollm2", os.path.expanduser("~/.cache/spectrum-rft"))
    return load_tokenizer(model_dir), load_model(model_dir)


def _matcher(tok, model, tools):
    import xgrammar as xgr

    s = S.GroupSampler(tok, tools=tools, grammar_tools=tools, constrained=True, vocab_size=model.config.vocab_size)
    return s, (lambda: xgr.GrammarMatcher(s.compiled_grammar))


def _accepts(matcher, tok, text: str) -> bool:
    for t in tok.encode(text, add_special_tokens=False):
        if not matcher.accept_token(t):
            return False
    return True


def test_grammar_accepts_the_templates_call_and_refuses_malformed_ones(smollm):
    tok, model = smollm
    tools = tool_schemas("scaffold")
    s, new = _matcher(tok, model, tools)
    # the call exactly as the chat template renders it (what SFT teaches)
    msgs = [{"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "submit_report", "arguments": {"center_freqs": [41.5, 97.0]}}}]}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    call = text[text.index("<tool_call>"):text.index("</tool_call>") + len("</tool_call>")]
    m = new()
    assert _accepts(m, tok, call) and m.accept_token(s.stop_ids[0]) and m.is_terminated()
    for bad in ('<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": "many"}}\n</tool_call>',
                '<tool_call>\n{"name": "delete_all", "arguments": {}}\n</tool_call>',
                '<tool_call>\n{"name": "submit_report", "arguments": {"centre": [1]}}\n</tool_call>',
                '<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": [720.5]}}\n</tool_call>',
                '<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": [-1]}}\n</tool_call>',
                '<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": [1], "bandwidths": [8]}}\n</tool_call>',
                'I think the peaks are at 41.5 MHz',
                '<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": [' + ", ".join(["1"] * 18) + "]}}"):
        assert not _accepts(new(), tok, bad), bad


def test_the_env_not_the_grammar_refuses_a_list_over_the_cap(smollm):
    """The grammar lets a list run one item past the cap, so the failure is sampled (and scored 0 by the
    env) instead of hidden; the 18th item is where the grammar closes the list."""
    from spectrum_rft.training.spectrum.trl_data import grpo_rows
    from spectrum_rft.training.spectrum.trl_env import judge

    tok, model = smollm
    s, new = _matcher(tok, model, tool_schemas("scaffold"))
    assert S.tool_call_schema(tool_schemas("scaffold"))["properties"]["arguments"]["properties"]["center_freqs"][
        "maxItems"] == 17
    assert S.tool_call_schema(tool_schemas("scaffold"), over_cap=0)["properties"]["arguments"]["properties"][
        "center_freqs"]["maxItems"] == 16
    with pytest.raises(ValueError, match="over_cap"):
        S.tool_call_schema(tool_schemas("scaffold"), over_cap=-1)
    row = grpo_rows(1, prompt="weak", memory_mode="scaffold", salt="test-cap")[0]
    for n, grammar_ok, env_ok in ((16, True, True), (17, True, False)):
        centres = [10.0 + 40 * i for i in range(n)]
        call = ('<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": ['
                + ", ".join(f"{c:g}" for c in centres) + ']}}\n</tool_call>')
        m = new()
        assert (_accepts(m, tok, call) and m.accept_token(s.stop_ids[0])) is grammar_ok
        message = {"role": "assistant", "tool_calls": [{"function": {"name": "submit_report",
                                                                     "arguments": {"center_freqs": centres}}}]}
        assert (judge(row, message).metrics()["scans_skipped"] == 0) is env_ok
    m = new()
    seventeen = '<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": [' + ", ".join(["1"] * 17)
    assert _accepts(m, tok, seventeen) and not m.accept_token(tok.encode(",", add_special_tokens=False)[0])


def test_grammar_masks_replay_each_turn_from_its_start(smollm):
    """On TRL's env path a completion holds turns separated by tool results (``tool_mask`` 0): each turn
    is replayed from a fresh matcher, so the second call's masks equal those of the call alone; a turn the
    grammar did not produce is counted and left unmasked from the refused token on."""
    import torch

    tok, model = smollm
    tools = tool_schemas("scaffold")
    masks = S.GrammarMasks.for_tools(tok, tools, model.config.vocab_size)
    stop = S.stop_ids(tok)[-1]

    def call(centres):
        return tok.encode('<tool_call>\n{"name": "submit_report", "arguments": {"center_freqs": ['
                          + ", ".join(map(str, centres)) + "]}}\n</tool_call>", add_special_tokens=False) + [stop]

    a, b, result = call([41.5, 97]), call([300]), tok.encode("Scan 2 of 12: peaks at 300.1", add_special_tokens=False)
    ids = torch.tensor([a + result + b])
    mask = torch.tensor([[1] * len(a) + [0] * len(result) + [1] * len(b)])
    both = masks(ids, mask)
    alone_a = masks(torch.tensor([a]), torch.ones(1, len(a), dtype=torch.long))
    alone_b = masks(torch.tensor([b]), torch.ones(1, len(b), dtype=torch.long))
    assert both.shape == (len(a) + len(b), model.config.vocab_size) and masks.refused == 0
    assert torch.equal(both, torch.cat([alone_a, alone_b]))
    assert all(bool(both[i, t]) for i, t in enumerate(a + b))  # every sampled token was allowed
    bad = tok.encode("I think 41.5", add_special_tokens=False)
    free = masks(torch.tensor([bad]), torch.ones(1, len(bad), dtype=torch.long))
    assert masks.refused == 1 and bool(free.all())  # refused at its first token: unmasked from there on


def _trl_batch(tok, prompt_ids: list[int], completions: list[list[int]]) -> dict:
    """TRL's learner inputs for one group: prompts left-padded (one prompt here), completions right-padded."""
    import torch

    width = max(len(c) for c in completions)
    pad = tok.pad_token_id
    return {"prompt_ids": torch.tensor([prompt_ids] * len(completions)),
            "prompt_mask": torch.ones(len(completions), len(prompt_ids), dtype=torch.long),
            "completion_ids": torch.tensor([c + [pad] * (width - len(c)) for c in completions]),
            "completion_mask": torch.tensor([[1] * len(c) + [0] * (width - len(c)) for c in completions])}


def test_masked_learner_trains_the_policy_that_sampled(smollm, tmp_path):
    """On a constrained batch the masked learner's log-prob of every sampled token equals the sampler's to
    float round-off, a token the grammar forced has log-prob 0 and no gradient, and the unmasked learner
    (the model's own policy) puts less mass on the same completions."""
    import torch

    from spectrum_rft.training.sc_grpo import probe_trainer
    from spectrum_rft.training.spectrum.trl_data import grpo_rows, scan_sampler

    tok, model = smollm
    row = grpo_rows(1, prompt="weak", memory_mode="scaffold", salt="test-masked", scan_in_prompt=True)[0]
    s = scan_sampler(tok, "scaffold", constrained=True, max_new_tokens=200, vocab_size=model.config.vocab_size)
    ids = s.prompt_ids(row["prompt"])
    comps, sampled = s.sample(model, ids, 3, temperature=0.8, seed=5)
    inputs = _trl_batch(tok, ids, comps)
    masks = s.grammar_masks()
    trainer = probe_trainer(model, tok, str(tmp_path / "p"), temperature=0.8, grammar_masks=masks)
    model.zero_grad(set_to_none=True)
    lp, tokens, mask, unmasked_y = trainer.learner_logprobs(model, inputs)
    learner_y = lp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    sampler_y = torch.tensor([x for lps in sampled for x in lps])
    assert learner_y.shape == sampler_y.shape and masks.refused == 0
    assert torch.allclose(learner_y.detach(), sampler_y, atol=2e-4, rtol=0), \
        float((learner_y.detach() - sampler_y).abs().max())
    forced = masks(inputs["completion_ids"], inputs["completion_mask"]).sum(-1) == 1  # the tags, the name, ...
    assert int(forced.sum()) >= 3 * 10 and (learner_y.detach()[forced] == 0).all()
    learner_y[forced].sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())  # forced tokens: no gradient
    assert (unmasked_y <= learner_y.detach() + 1e-5).all()  # the grammar only removes mass elsewhere
    assert float((unmasked_y - learner_y.detach())[forced].sum()) < -0.5
    free = ~forced
    model.zero_grad(set_to_none=True)
    lp2, *_ = trainer.learner_logprobs(model, inputs)
    lp2.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)[free].sum().backward()
    assert any(p.grad is not None and p.grad.any() for p in model.parameters())  # chosen tokens do train
    model.zero_grad(set_to_none=True)


def test_constrained_samples_are_reports_the_env_accepts(smollm):
    from trl.chat_template_utils import parse_response

    from spectrum_rft.training.spectrum.trl_data import grpo_rows, scan_sampler, tool_schemas_of
    from spectrum_rft.training.spectrum.trl_env import judge, tool_env_class

    tok, model = smollm
    row = grpo_rows(1, prompt="weak", memory_mode="scaffold", salt="test-sampler", scan_in_prompt=True)[0]
    s = scan_sampler(tok, "scaffold", constrained=True, max_new_tokens=256, vocab_size=model.config.vocab_size)
    assert s.tools == tool_schemas_of(tool_env_class("scaffold")())  # the prompt renders TRL's tool schemas
    ids = s.prompt_ids(row["prompt"])
    comps, logps = s.sample(model, ids, 4, temperature=1.0, seed=3)
    assert s.stats.prefill_tokens == len(ids) - 1  # one prefill for the group
    scored = 0
    for c, lp in zip(comps, logps):
        assert c[-1] in s.stop_ids and len(lp) == len(c) and all(x <= 1e-6 for x in lp)
        message = parse_response(tok, c, prefix=ids)
        calls = message.get("tool_calls") or []
        assert [x["function"]["name"] for x in calls] == ["submit_report"]
        centres = calls[0]["function"]["arguments"]["center_freqs"]
        assert isinstance(centres, list) and len(centres) <= 17  # the cap, and one past it
        m = judge(row, message).metrics()
        scored += m["scans_skipped"] == 0
        assert all(0.0 <= x <= 720.0 for x in centres)  # the grammar holds the band (tool_schemas' bounds)
        assert "bandwidths" not in calls[0]["function"]["arguments"]  # not in the fixed-width preset's schema
        # every constrained report is one the env scores, but for a list past the cap, which the env refuses
        assert m["scans_skipped"] == (len(centres) > 16)
    assert scored >= 1, "no constrained completion was a report the env scored"


def test_group_prefill_equals_separate_prompts_greedy(smollm):
    """The shared KV cache is only an optimisation: greedy completions of a group equal the same prompt
    decoded on its own, without a shared prefill."""
    from spectrum_rft.training.spectrum.trl_data import grpo_rows, tool_schemas_of
    from spectrum_rft.training.spectrum.trl_env import tool_env_class

    tok, model = smollm
    row = grpo_rows(1, prompt="weak", memory_mode="scaffold", salt="test-sampler-2", scan_in_prompt=True)[0]
    s = S.GroupSampler(tok, tools=tool_schemas_of(tool_env_class("scaffold")()), max_new_tokens=24,
                       vocab_size=model.config.vocab_size)
    ids = s.prompt_ids(row["prompt"])
    grouped, _ = s.sample(model, ids, 2, temperature=0)
    alone, _ = s.sample_prompts(model, [ids], temperature=0)
    assert grouped[0] == grouped[1] == alone[0]


def _greedy_under_a_plain_forward(model, prompt_ids, completion):
    """Every token of ``completion`` is the argmax (to float round-off) of one plain forward over prompt +
    completion: what greedy decoding of ``prompt_ids`` must produce, however its cache was built."""
    import torch

    ids = torch.tensor([list(prompt_ids) + list(completion)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:len(prompt_ids) - 1 + len(completion)]
    chosen = logits.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)
    return float((logits.max(-1).values - chosen).max())


def test_a_shared_preamble_changes_nothing_but_the_prefill(smollm):
    """A step's prompts share the system prompt and the tool preamble (~70 % of their tokens): under
    ``preamble`` it is prefilled once and each prompt's prefill starts from a copy of its cache (cut where a
    prompt leaves it). Greedy completions, one group at a time or every prompt in one padded batch
    (``sample_each``), are still what a plain forward of each prompt picks, and the prefill runs about half
    the tokens."""
    from spectrum_rft.training.spectrum.trl_data import grpo_rows, scan_sampler

    tok, model = smollm
    rows = grpo_rows(3, prompt="weak", memory_mode="scaffold", salt="test-preamble", scan_in_prompt=True)
    s = scan_sampler(tok, "scaffold", max_new_tokens=24, vocab_size=model.config.vocab_size)
    ids = [s.prompt_ids(r["prompt"]) for r in rows]
    assert len({len(i) for i in ids}) > 1  # the padded batch has padding to place
    plain = []
    for p in ids:
        plain.append(s.sample(model, p, 1, temperature=0)[0][0])
    alone = s.stats.prefill_tokens
    s.stats = S.SamplerStats()
    with s.preamble(model, ids):
        shared = [s.sample(model, p, 1, temperature=0)[0][0] for p in ids]
        batched = s.sample_each(model, ids, temperature=0)[0]
        groups, logprobs = s.sample_each(model, ids, 2, temperature=0)  # a step's groups: each prompt's 2, in order
        assert len(groups) == len(logprobs) == 6 and all(len(c) == len(lp) for c, lp in zip(groups, logprobs))
        assert groups[0::2] == groups[1::2]
        assert all(_greedy_under_a_plain_forward(model, p, c) < 1e-3 for p, c in zip(ids, groups[0::2]))
        assert s._preamble is not None and len(s._preamble[0]) >= 0.5 * min(map(len, ids))
    assert s._preamble is None  # the cache does not outlive the step (the model changes after it)
    for p, a, b, c in zip(ids, plain, shared, batched):
        assert len(a) and len(b) and len(c)
        for comp in (a, b, c):
            assert _greedy_under_a_plain_forward(model, p, comp) < 1e-3
    # the prefill: the preamble once, then only each prompt's own part (twice: one by one, then batched)
    assert s.stats.prefill_tokens < 0.6 * 3 * alone  # three rounds, each prompt's own part only
    off = scan_sampler(tok, "scaffold", max_new_tokens=24, vocab_size=model.config.vocab_size, share_preamble=False)
    with off.preamble(model, ids):
        assert off._preamble is None


def test_a_drafted_greedy_reply_is_the_greedy_reply_in_fewer_forwards(smollm):
    """``greedy`` proposes the tokens that followed the same last tokens in its previous reply and keeps what the
    model's argmax agrees with: each reply is still what a plain forward picks token by token, stops at the
    turn's end, and once a reply exists to draft from, the next one takes fewer forwards than tokens."""
    from spectrum_rft.training.spectrum.trl_data import grpo_rows, scan_sampler

    tok, model = smollm
    rows = grpo_rows(3, prompt="weak", memory_mode="scaffold", salt="test-draft", scan_in_prompt=True)
    s = scan_sampler(tok, "scaffold", max_new_tokens=40, vocab_size=model.config.vocab_size)
    forwards = []
    real_forward = model.forward

    def counting(*a, **kw):
        forwards.append(1)
        return real_forward(*a, **kw)

    replies = []
    model.forward = counting
    try:
        for r in (*rows, rows[-1]):  # the last prompt twice: its second reply drafts from its first
            forwards.clear()
            ids = s.prompt_ids(r["prompt"])
            replies.append((ids, s.greedy(model, ids), len(forwards)))
    finally:
        del model.forward
    for ids, reply, _ in replies:
        assert 0 < len(reply) <= 40
        assert _greedy_under_a_plain_forward(model, ids, reply) < 1e-3
        assert all(t not in s.stop_ids for t in reply[:-1])
    # the same prompt again: the same reply, drafted whole from the first (the prefill, then few checks of 16)
    (_, first, _), (_, again, n_again) = replies[-2:]
    assert again == first and n_again <= 2 + -(-len(again) // 16) < len(again)
    assert S._lookup([1, 2, 3], [9, 2, 3, 4, 5, 6], 2) == [4, 5] and S._lookup([7], [1, 2], 3) == []


def test_batched_groups_sample_what_group_by_group_samples(smollm):
    """``batch_groups`` only changes how a step's groups go through the model: greedy, two groups of two
    give the same completions (and log-probs to float round-off) batched as one by one, in TRL's order."""
    from types import SimpleNamespace

    from spectrum_rft.training.spectrum.trl_data import grpo_rows, scan_sampler

    tok, model = smollm
    rows = grpo_rows(2, prompt="weak", memory_mode="scaffold", salt="test-sampler-batch", scan_in_prompt=True)
    prompts = [rows[0]["prompt"]] * 2 + [rows[1]["prompt"]] * 2
    assert rows[0]["prompt"] != rows[1]["prompt"]
    trainer = SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m),
                              args=SimpleNamespace(temperature=0.0, top_p=1.0, top_k=None))
    out = {}
    for batched in (False, True):
        s = scan_sampler(tok, "scaffold", constrained=True, max_new_tokens=40, vocab_size=model.config.vocab_size,
                         batch_groups=batched)
        out[batched] = s(prompts, trainer)
        assert s.stats.groups == 2
    one, both = out[False], out[True]
    assert one["prompt_ids"] == both["prompt_ids"]
    assert one["completion_ids"] == both["completion_ids"]
    assert one["completion_ids"][0] != one["completion_ids"][2]  # two prompts, two answers
    for a, b in zip(one["logprobs"], both["logprobs"]):
        assert max(abs(x - y) for x, y in zip(a, b)) < 1e-3


def test_scan_prompt_is_the_env_paths_text():
    """The group sampler's prompt holds the scan text TRL's env path would append (same band, same scan)."""
    from spectrum_rft.training.spectrum.trl_data import grpo_rows
    from spectrum_rft.training.spectrum.trl_env import tool_env_class

    plain = grpo_rows(3, prompt="weak", memory_mode="scrambled", salt="s")
    inline = grpo_rows(3, prompt="weak", memory_mode="scrambled", salt="s", scan_in_prompt=True)
    for a, b in zip(plain, inline):
        obs = tool_env_class("scrambled")().reset(**a)
        assert a["prompt"][1]["content"] == "" and b["prompt"][1]["content"] == obs
        assert b["prompt"][0] == a["prompt"][0] and b["row_id"] == a["row_id"] and b["scan"] == a["scan"]


def test_judge_scores_text_only_and_junk_as_skipped():
    from spectrum_rft.training.spectrum.trl_data import grpo_rows
    from spectrum_rft.training.spectrum.trl_env import judge, message_calls

    assert message_calls({"tool_calls": [{"function": {"name": "a", "arguments": {"x": 1}}}, "junk",
                                         {"name": "b", "arguments": "{}"}]}) == [
        {"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": "{}"}]
    assert message_calls(None) == message_calls({"tool_calls": "x"}) == []

    row = grpo_rows(1, prompt="weak", memory_mode="scaffold", salt="s")[0]
    for message in (None, {"role": "assistant", "content": "no call"},
                    {"role": "assistant", "tool_calls": [{"function": {"name": "rm", "arguments": {}}}]},
                    {"role": "assistant", "tool_calls": [{"function": {"name": "submit_report",
                                                                       "arguments": {"center_freqs": [float("nan")]}}}]},
                    {"role": "assistant", "tool_calls": ["junk"]}):
        m = judge(row, message).metrics()
        assert m["scans_skipped"] == 1 and m["score"] == 0.0
    ok = judge(row, {"role": "assistant", "tool_calls": [{"function": {"name": "submit_report",
                                                                       "arguments": {"center_freqs": [100.0]}}}]})
    assert ok.metrics()["scans_skipped"] == 0


def test_config_refuses_combinations_that_cannot_work():
    from spectrum_rft.training.spectrum.trl_run import GrpoConfig

    with pytest.raises(ValueError, match="--constrained needs"):
        GrpoConfig(constrained=True).check()
    with pytest.raises(ValueError, match="scan episodes only"):
        GrpoConfig(arm="weak-scaffold", memory_mode="icl", sampler="group").check()
    with pytest.raises(ValueError, match="unknown sampler"):
        GrpoConfig(sampler="fast").check()
    with pytest.raises(ValueError, match="micro_batch"):
        GrpoConfig(prompts=2, group=8, micro_batch=3).check()
    with pytest.raises(ValueError, match="keep --beta 0"):
        GrpoConfig(sampler="group", shared_prefix=True, beta=0.04).check()
    with pytest.raises(ValueError, match="importance-sampling"):
        GrpoConfig(shared_prefix=True, use_vllm=True).check()
    GrpoConfig(sampler="group", constrained=True, micro_batch=8).check()
    GrpoConfig(sampler="group", constrained=True, shared_prefix=True).check()
    with pytest.raises(ValueError, match="unknown learner"):
        GrpoConfig(learner="both").check()
    with pytest.raises(ValueError, match="keep --beta 0"):
        GrpoConfig(sampler="group", constrained=True, beta=0.04).check()
    GrpoConfig(sampler="group", constrained=True, beta=0.04, learner="unmasked").check()
    GrpoConfig(use_vllm=True, constrained=True).check()  # the masked learner against vLLM's log-probs
    with pytest.raises(ValueError, match="--batch-groups"):
        GrpoConfig(batch_groups=True).check()
    GrpoConfig(sampler="group", batch_groups=True).check()


@pytest.mark.parametrize("shared_prefix,learner", [(False, "unmasked"), (True, "masked")])
def test_constrained_grpo_step_in_the_real_trainer(tmp_path, shared_prefix, learner):
    """One GRPO step through TRL's GRPOTrainer with the constrained group sampler: every completion is a
    submit_report call the env scored, its text and parsed report are in rollouts.jsonl, and the run's
    config records the sampler. With the learner's shared prefix the step runs the prompt once per
    micro-batch (logged ``learner_tokens`` below TRL's ``num_tokens``) and the LoRA weights move. The masked
    learner is the sampler's policy (importance ratio 1 per token) and logs the unmasked policy's ratio
    beside it (below 1: the grammar forced tokens the model alone would not always write)."""
    from spectrum_rft.training.spectrum.trl_run import GrpoConfig, run_train

    out = tmp_path / "run"
    cfg = GrpoConfig(out=str(out), arm="weak-scaffold", steps=1, prompts=1, group=4, micro_batch=2,
                     max_completion_length=256, lora_layers=1, threads=2, sampler="group", constrained=True,
                     temperature=0.7, seed=1, shared_prefix=shared_prefix, learner=learner)
    run_train(cfg)
    log = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(x for x in log if "num_tokens" in x)
    if shared_prefix:
        assert 0 < step["learner_tokens"] < step["num_tokens"] / 1.5  # 4 x ~600-token prompts -> 2 prefills
        assert step["grad_norm"] > 0
    else:
        assert "learner_tokens" not in step
    if learner == "masked":
        assert abs(step["is_ratio_masked"] - 1) < 1e-3 and abs(step["seq_log_ratio_masked"]) < 0.02
        assert step["is_ratio_unmasked"] < 1 and step["seq_log_ratio_unmasked"] < step["seq_log_ratio_masked"]
    else:
        assert "is_ratio_masked" not in step  # TRL's own learner
    lines = [json.loads(x) for x in (out / "rollouts.jsonl").read_text().splitlines()]
    # one generation of the whole group, learnt in two micro-batches of 2
    assert len(lines) == 4 and len({x["band_fingerprint"] for x in lines}) == 1
    for x in lines:
        assert x["completion"].startswith("<tool_call>\n{\"name\": \"submit_report\"")
        assert x["completion"].endswith("</tool_call><|im_end|>")
        assert [c["name"] for c in x["calls"]] == ["submit_report"]
    config = json.loads((out / "config.json").read_text())
    assert config["sampler"] == "group" and config["constrained"] is True
    assert (out / "model").is_dir()
