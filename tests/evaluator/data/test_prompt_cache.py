"""Repeated prompts: the period inferred from input lengths, and vLLM's prefix cache of them."""

from __future__ import annotations

import json
from dataclasses import replace

import numba as nb
import numpy as np
import pytest

from evaluator.api import STAT_INDEX, StepModel
from evaluator.data.prompt_cache import prompt_period, with_prompt_cache
from evaluator.data.scenarios import make_scenario
from evaluator.sim.simulator import _STEP_SIG, simulate


@nb.njit(_STEP_SIG)
def _const_scalar(f, c):
    return c[0]


CONST = StepModel("const", lambda F, c: np.full(F.shape[1], c[0]), _const_scalar)


def _scenario(data_path, arrivals, inputs, outputs, prompts, **kw):
    sc = make_scenario("hand", arrivals, inputs, outputs,
                       model_dir=data_path / "models" / "Llama-2-7b-hf",
                       hardware=data_path / "hardware" / "h100-sxm.json", **kw)
    return replace(sc, prompt_id=np.asarray(prompts, dtype=np.int64))


def _first_kv(c, r):
    """Tokens a request had computed (its cache hit) when it was first scheduled."""
    return int(c.member_kv[c.member_req == r][0])


def test_period_of_a_cycling_pool():
    rng = np.random.default_rng(3)
    pool = rng.integers(550, 600, size=7)
    lengths = np.tile(pool, 50)
    assert prompt_period(lengths) == 7
    lengths[::40] = 999  # a few requests that do not repeat (reordered arrivals)
    assert prompt_period(lengths) == 7


def test_a_request_whose_length_differs_from_its_slot_is_another_prompt(data_path):
    lengths = np.tile(np.array([560, 571, 583, 590, 566]), 40)
    lengths[7] = 600  # slot 2, another length
    sc = make_scenario("x", np.arange(lengths.size) * 1e5, lengths, np.full(lengths.size, 5),
                       model_dir=data_path / "models" / "Llama-2-7b-hf",
                       hardware=data_path / "hardware" / "h100-sxm.json")
    pid = with_prompt_cache(sc).prompt_id
    assert pid[7] not in set(pid[np.arange(lengths.size) != 7].tolist())
    assert pid[2] == pid[12] != pid[7]


def test_two_neighbours_that_swapped_on_the_way_send_each_others_prompts(data_path):
    """Request 7 (slot 2) arrived with slot 3's length and request 8 with slot 2's: they
    were reordered, and each hits the cache of the prompt it sent (the bundled runs'
    requests that differ from their slot are nearly all such)."""
    lengths = np.tile(np.array([560, 571, 583, 590, 566]), 40)
    lengths[[7, 8]] = lengths[[8, 7]]
    lengths[21] = 560  # slot 1 with slot 0's length, two slots from slot 3's 590 too
    sc = make_scenario("x", np.arange(lengths.size) * 1e5, lengths, np.full(lengths.size, 5),
                       model_dir=data_path / "models" / "Llama-2-7b-hf",
                       hardware=data_path / "hardware" / "h100-sxm.json",
                       n_prefix_groups=5, system_prompt_len=100)
    out = with_prompt_cache(sc)
    pid = out.prompt_id
    assert pid[7] == pid[3] and pid[8] == pid[2] and pid[21] == pid[0]
    assert len(set(pid.tolist())) == 5
    assert out.prefix_group[7] == 3 and out.prefix_group[8] == 2 and out.prefix_group[21] == 0


def test_no_period_without_repetition_or_with_one_length():
    rng = np.random.default_rng(4)
    assert prompt_period(rng.integers(500, 600, size=2000)) == 0
    assert prompt_period(np.full(500, 512)) == 0  # equal lengths say nothing
    assert prompt_period(np.array([5, 5])) == 0


def test_unknown_lengths_are_ignored_and_given_their_prompts_length(data_path):
    pool = np.array([560, 571, 583, 590, 566])
    lengths = np.tile(pool, 40)
    failed = np.random.default_rng(5).random(lengths.size) < 0.3
    filled = np.where(failed, 575, lengths)  # the loader's median for uncounted inputs
    assert prompt_period(filled) == 0
    assert prompt_period(filled, ~failed) == 5
    sc = make_scenario("x", np.arange(lengths.size) * 1e5, filled, np.full(lengths.size, 5),
                       model_dir=data_path / "models" / "Llama-2-7b-hf",
                       hardware=data_path / "hardware" / "h100-sxm.json",
                       e2e_s=np.where(failed, np.nan, 1.0), ttft_s=np.full(lengths.size, 0.1),
                       n_prefix_groups=2, system_prompt_len=100)
    out = with_prompt_cache(sc)
    np.testing.assert_array_equal(out.input_tokens, lengths)
    slot = np.arange(lengths.size) % 5
    np.testing.assert_array_equal(out.prefix_group, slot % 2)
    # one prompt per slot (its lengths agree), distinct across slots
    assert len(set(zip(slot.tolist(), out.prompt_id.tolist(), strict=True))) == 5
    assert len(set(out.prompt_id.tolist())) == 5
    assert out.meta["prompt_period"] == 5


def test_a_repeated_prompt_hits_all_its_full_blocks_but_the_last_token(data_path):
    # 580 tokens: 36 full blocks; vLLM hits at most 579 tokens, i.e. 36 blocks = 576
    sc = _scenario(data_path, [0.0, 1e6, 2e6], [580, 580, 560], [3, 3, 3], [0, 0, 0],
                   system_prompt_len=100, n_prefix_groups=1)
    c = simulate(sc, CONST, np.array([100.0]), record_members=True).corpus
    assert _first_kv(c, 0) == 0
    assert _first_kv(c, 1) == 576
    assert _first_kv(c, 2) == 96  # same id, other length: another prompt; system prompt only


def test_a_prompt_of_exactly_full_blocks_recomputes_its_last_block(data_path):
    sc = _scenario(data_path, [0.0, 1e6], [576, 576], [2, 2], [4, 4])
    c = simulate(sc, CONST, np.array([100.0]), record_members=True).corpus
    assert _first_kv(c, 1) == 560  # 575 tokens at most: 35 blocks


def test_without_prompt_ids_only_the_system_prompt_hits(data_path):
    sc = _scenario(data_path, [0.0, 1e6], [580, 580], [3, 3], [0, 0],
                   system_prompt_len=100, n_prefix_groups=1)
    c = simulate(replace(sc, prompt_id=None), CONST, np.array([100.0]),
                 record_members=True).corpus
    assert _first_kv(c, 1) == 96


def test_least_recently_released_prompt_is_evicted_first(data_path):
    # 100 blocks. Prompts A (r0) and B (r1) of 20 and 21 full blocks finish and stay
    # cached; r2 (a prompt of its own, 1200 tokens: 75 blocks) finds 59 free: A, released
    # first, is evicted; B survives. Then r3 (A) misses and r4 (B) hits.
    sc = _scenario(data_path, [0.0, 1e5, 1e6, 5e6, 6e6], [330, 340, 1200, 330, 340],
                   [2, 2, 10, 2, 2], [0, 1, -1, 0, 1], kv_blocks=100)
    c = simulate(sc, CONST, np.array([1000.0]), record_members=True).corpus
    assert [_first_kv(c, r) for r in range(5)] == [0, 0, 0, 0, 336]
    assert c.kv_used.max() <= 100


def test_a_held_prompt_cache_is_not_evicted(data_path):
    # r0 and r1 share prompt 0 and run together; r2 needs more than is free: r0's and r1's
    # shared blocks stay (they are in use), r2 waits for them to finish instead.
    sc = _scenario(data_path, [0.0, 2e3, 3e3], [330, 330, 1300], [40, 40, 3], [0, 0, 1],
                   kv_blocks=95)
    res = simulate(sc, CONST, np.array([1000.0]), record_members=True)
    c = res.corpus
    assert _first_kv(c, 1) == 320
    assert res.n_preemptions == 0 and (c.last_step >= 0).all()
    assert c.admit_step[2] > c.last_step[0]


def test_measured_runs_repeat_a_pool_of_100_prompts(all_scenarios):
    """Every request, reordered ones included, sends one of the pool's 100 prompts."""
    for sc in all_scenarios:
        assert sc.meta.get("prompt_period") == 100, sc.name
        _, counts = np.unique(sc.prompt_id, return_counts=True)
        assert counts.size == 100, sc.name  # no request left with a prompt of its own
        assert np.abs(counts - sc.n_requests // 100).max() <= 2, sc.name


@pytest.mark.parametrize("name", ["20260217-202857-llama-2-70b-tp4-general",
                                  "20260218-150304-codellama-34b-tp2-general"])
def test_prefill_per_request_as_the_engine_measured(all_scenarios, name):
    """The engine's sampled steps (data ``steps/enriched_steps.parquet``) computed 15.2
    (70B ``general``) and 11.2 (CodeLlama ``general``) prompt tokens per request; with
    only the system prompt cached the replica computes ~480."""
    from evaluator.scoring.baselines import TRAINED_PHYSICS, trained_physics_consts

    sc = next(s for s in all_scenarios if s.name == name)
    consts = trained_physics_consts(sc)
    per_req = {}
    for label, s in (("prompts", sc), ("system", replace(sc, prompt_id=None))):
        st = simulate(s, TRAINED_PHYSICS, consts).corpus.stats
        per_req[label] = st[STAT_INDEX["prefill_tokens"]].sum() / s.n_requests
    assert per_req["prompts"] < 25
    assert per_req["system"] > 400


@pytest.mark.slow
def test_the_loader_and_the_commands_switch_prompt_caching(data_path, capsys):
    from evaluator.api import load_scenarios
    from evolve.cli.main import main

    name = "20260218-150956-codellama-34b-tp2-codegen"
    (on,) = load_scenarios(data_path, [name])
    (off,) = load_scenarios(data_path, [name], prompt_cache=False)
    assert on.prompt_id is not None and off.prompt_id is None
    assert main(["data", "--data", str(data_path), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)["experiments"]
    assert all(100 <= e["prompts"] <= 210 for e in listing)  # the pool, and stray lengths
    ttft = {}
    for flags in ([], ["--no-prompt-cache"]):
        assert main(["validate", "linear", "--split", "validate", "--json", "--no-plots",
                     "--data", str(data_path), *flags]) == 0
        ttft[bool(flags)] = json.loads(capsys.readouterr().out)["runs"][name]["pred"]["ttft_mean"]
    assert ttft[False] < ttft[True]  # the cached prompts skip most of their prefill
