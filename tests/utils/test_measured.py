"""Choices made by measuring this machine (`modeling_minibert.utils.measured`): the fastest candidate wins by a
margin over the plain one, the answer is remembered per machine and workload, and a broken or unwritable cache
only costs a measurement."""

from __future__ import annotations

import json

import pytest
import torch

from modeling_minibert.utils import measured, precision


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIBERT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "measured.json"


def fake_timings(monkeypatch, seconds: dict[str, float]) -> list:
    """`measured.timings` answering `seconds`; the list records each measurement's candidates."""
    calls = []
    monkeypatch.setattr(measured, "timings", lambda candidates: calls.append(sorted(candidates)) or dict(seconds))
    return calls


def test_the_cache_lives_in_minibert_cache_or_under_hf_home(cache, monkeypatch, tmp_path):
    assert measured.cache_file() == cache
    monkeypatch.delenv("MINIBERT_CACHE")
    monkeypatch.setattr("huggingface_hub.constants.HF_HOME", str(tmp_path / "hf"))
    assert measured.cache_file() == tmp_path / "hf" / "minibert" / "measured.json"


@pytest.mark.parametrize(
    "seconds, choice",
    [
        ({"plain": 1.0, "fast": 0.5}, "fast"),  # twice as fast
        ({"plain": 1.0, "fast": 0.95}, "plain"),  # within the margin: the plain way stays
        ({"plain": 1.0, "fast": 2.0}, "plain"),
        ({"plain": 1.0, "fast": 0.8, "faster": 0.6}, "faster"),
    ],
)
def test_the_fastest_wins_by_the_margin_and_is_remembered(cache, monkeypatch, seconds, choice):
    calls = fake_timings(monkeypatch, seconds)
    candidates = dict.fromkeys(seconds, lambda: None)
    assert measured.fastest("workload", candidates) == choice
    assert measured.fastest("workload", candidates) == choice  # read back: not measured again
    assert len(calls) == 1
    kept = json.loads(cache.read_text())
    [(key, answer)] = kept.items()
    assert key == f"workload on {measured.machine()}" and answer["choice"] == choice and answer["seconds"] == seconds
    # another workload, another thread count or another machine is another question
    fake_timings(monkeypatch, {"plain": 1.0, "fast": 2.0})
    assert measured.fastest("another workload", candidates) == "plain"
    monkeypatch.setattr(measured, "machine", lambda: "another CPU")
    assert measured.fastest("workload", candidates) == "plain"
    assert len(json.loads(cache.read_text())) == 3


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"workload on X": 3}'])
def test_a_broken_cache_is_measured_over(cache, monkeypatch, content):
    cache.parent.mkdir()
    cache.write_text(content)
    calls = fake_timings(monkeypatch, {"plain": 1.0, "fast": 0.5})
    assert measured.fastest("workload", {"plain": lambda: None, "fast": lambda: None}) == "fast"
    assert calls and json.loads(cache.read_text())[f"workload on {measured.machine()}"]["choice"] == "fast"


def test_a_remembered_answer_that_is_no_candidate_is_measured_again(cache, monkeypatch):
    cache.parent.mkdir()
    cache.write_text(json.dumps({f"workload on {measured.machine()}": {"choice": "gone"}}))
    calls = fake_timings(monkeypatch, {"plain": 1.0, "fast": 0.5})
    assert measured.fastest("workload", {"plain": lambda: None, "fast": lambda: None}) == "fast" and calls


def test_an_unwritable_cache_only_costs_the_measurement(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MINIBERT_CACHE", str(blocker / "cache"))  # below a file: cannot be made
    calls = fake_timings(monkeypatch, {"plain": 1.0, "fast": 0.5})
    assert measured.fastest("workload", {"plain": lambda: None, "fast": lambda: None}) == "fast"
    assert measured.fastest("workload", {"plain": lambda: None, "fast": lambda: None}) == "fast"
    assert len(calls) == 2


def test_timings_interleave_the_candidates_after_a_warm_up_each():
    order = []
    medians = measured.timings({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, rounds=3)
    assert order == ["a", "b"] * 4 and set(medians) == {"a", "b"} and all(s >= 0 for s in medians.values())


def test_bf16_pays_measures_for_real_on_a_cpu_with_bf16_instructions(cache):
    """The real workload, timed: an answer either way, remembered with both timings."""
    precision.bf16_pays.cache_clear()
    try:
        pays = precision.bf16_pays(torch.device("cpu"))
    finally:
        precision.bf16_pays.cache_clear()
    if not precision.native_bf16(torch.device("cpu")):
        assert pays is False and not cache.exists()  # emulated bf16: nothing to measure
        return
    [answer] = json.loads(cache.read_text()).values()
    assert set(answer["seconds"]) == {"float32", "bf16"} and answer["choice"] == ("bf16" if pays else "float32")
