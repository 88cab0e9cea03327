"""``spectrum-rft channel``'s echo table: the echoes a run trains on against those the evaluator shows in
whole episodes (issue 40, item 3), from real evaluation folders of scripted policies."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from spectrum_rft.training.spectrum.channel import (WholeEpisodesError, echo_stats, main, training_echoes,
                                                    whole_episode_echoes)
from spectrum_rft.training.spectrum.trl_data import grpo_rows


@given(st.lists(st.tuples(st.floats(0, 700), st.integers(0, 5)), min_size=1, max_size=12, unique_by=lambda t: t[0]),
       st.integers(1, 16))
def test_echo_stats_of_echoes_made_of_true_centres(transmitters, cap):
    """An echo holding k of the band's t transmitters' centres (spaced apart): every centre is true, recall k/t."""
    truth = [(i * 50.0, i * 50.0 + 8.0) for i in range(len(transmitters))]
    sizes = [min(k, len(truth)) for _, k in transmitters]
    s = echo_stats([([lo + 4.0 for lo, _ in truth[:k]], truth, cap) for k in sizes])
    assert s["scans"] == len(sizes)
    assert s["size"]["mean"] == pytest.approx(sum(sizes) / len(sizes))
    assert s["at_cap"]["mean"] == pytest.approx(sum(k >= cap for k in sizes) / len(sizes))
    assert s["true_share"]["n"] == sum(k > 0 for k in sizes)
    assert not any(sizes) or s["true_share"]["mean"] == pytest.approx(1.0)
    assert s["recall"]["mean"] == pytest.approx(sum(k / len(truth) for k in sizes) / len(sizes))


def test_a_centre_off_every_transmitter_is_not_true():
    truth = [(0.0, 8.0), (100.0, 108.0)]
    s = echo_stats([([4.0, 50.0, 60.0, 4.5], truth, 16)])  # one true, two off, a second on the same transmitter
    assert s["true_share"]["mean"] == pytest.approx(1 / 4) and s["recall"]["mean"] == pytest.approx(1 / 2)


@pytest.fixture(scope="module")
def whole_folder(tmp_path_factory, offline_env):
    from spectrum_rft.tools import evaluation as se

    out = tmp_path_factory.mktemp("whole") / "eval"
    specs = se.model_specs(["spectrum/memoryless", "spectrum/accumulate", "spectrum/oracle"])
    se.run_eval(specs, path="turn", rows=3, out=out, prompt="weak", memory_mode="scaffold", salt="echo-test",
                progress=False)
    return out


def test_whole_episode_echoes_are_the_models_own_previous_reports(whole_folder):
    found = whole_episode_echoes(whole_folder)
    assert set(found) == {"spectrum/memoryless", "spectrum/accumulate", "spectrum/oracle"}
    assert all(len(v) == 3 * 11 for v in found.values())  # scans 2..12 of 3 episodes show an echo
    oracle, memoryless = echo_stats(found["spectrum/oracle"]), echo_stats(found["spectrum/memoryless"])
    assert oracle["true_share"]["mean"] == 1.0 and oracle["recall"]["mean"] == 1.0
    assert memoryless["at_cap"]["mean"] == 0.0 and memoryless["size"]["mean"] < 4  # the last scan's few peaks
    rows = json.loads((whole_folder / "rows.jsonl").read_text().splitlines()[0])
    assert rows["messages"]  # the folder really holds whole transcripts


def test_training_echoes_of_the_accumulate_prefix_match_the_accumulate_policy_in_whole_episodes(whole_folder):
    """The training rows' echo (scans 1..k-1 played by accumulate) is what accumulate shows itself in whole
    episodes: the same size and truth, within sampling error; a model's own echo is what differs."""
    rows = grpo_rows(120, prompt="weak", memory_mode="scaffold", salt="echo-test-train", prefix="t", episode="scan",
                     echo_history="accumulate")
    train = echo_stats(training_echoes(rows))
    whole = echo_stats(whole_episode_echoes(whole_folder)["spectrum/accumulate"])
    assert train["scans"] > 100
    assert abs(train["size"]["mean"] - whole["size"]["mean"]) < 3 * (train["size"]["se"] + whole["size"]["se"])
    assert train["true_share"]["mean"] > 0.5 and train["recall"]["mean"] > 0.5


def test_channel_prints_the_echo_table_and_refuses_a_folder_without_echoes(whole_folder, tmp_path, capsys):
    assert main(["--rows", "20", "--salt", "echo-cli", "--whole", str(whole_folder)]) == 0
    out = capsys.readouterr().out
    for label in ("training rows, weak-scaffold", "training rows, weak-scrambled", f"{whole_folder} spectrum/oracle",
                  "minus training, weak-scaffold"):
        assert label in out, out
    (tmp_path / "rows.jsonl").write_text("")
    assert main(["--rows", "20", "--whole", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no scan with an echo" in err
    with pytest.raises(WholeEpisodesError):
        whole_episode_echoes(tmp_path / "missing")


def test_a_row_whose_band_cannot_be_rebuilt_is_refused_in_one_line(whole_folder, tmp_path, capsys):
    row = json.loads((whole_folder / "rows.jsonl").read_text().splitlines()[0])
    row["input_metadata"]["dataset_info"]["environment_context"]["salt"] = "process"
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    assert main(["--rows", "20", "--whole", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "salt 'process'" in err and "rows.jsonl:1" in err
