"""Constants no step time of a group depends on keep their start value in both fits; the
rest are fitted as before."""

from __future__ import annotations

import numpy as np

from evolve.fitting import Box, closed_loop_fit, fit_program
from evolve.fitting.inert import inert_constants
from evolve.program.codegen import step_model
from evolve.program.language import parse_program

GATED = parse_program(
    'CONSTANTS = {"eff": (1.0, 0.5, 2.0), "moe_us": (30.0, 0.0, 400.0),\n'
    '             "ar_us": (15.0, 0.5, 200.0), "queue_us": (1000.0, 0.0, 1e5),\n'
    '             "output_token_us": (40.0, 0.0, 2000.0)}\n'
    "def step_time(f, c):\n"
    "    return c.eff * f.weight_read + f.kv_read + f.layers * (c.moe_us * f.is_moe\n"
    "        + c.ar_us * minimum(f.tp - 1.0, 1.0)) + 100.0\n"
    "def queueing_time(r, c):\n"
    "    return c.queue_us\n")


def _inert(scenario, features):
    return dict(zip(GATED.const_names, inert_constants(
        GATED, step_model(GATED), [features], GATED.init_vector(), Box(GATED)), strict=True))


def test_gated_constants_are_inert_only_where_their_gate_is_closed(refreshed):
    by_model = {sc.model: sc for sc in refreshed.scenarios}
    dense_tp1 = _inert(by_model["llama-2-7b"],
                       refreshed.fit_sets[by_model["llama-2-7b"].name].features)
    assert dense_tp1 == {"eff": False, "moe_us": True, "ar_us": True, "queue_us": False,
                         "output_token_us": False}
    moe_tp2 = _inert(by_model["mixtral-8x7b"],
                     refreshed.fit_sets[by_model["mixtral-8x7b"].name].features)
    assert not any(moe_tp2.values())  # every gate open; queue and E2E constants never inert
    none = inert_constants(GATED, step_model(GATED), [], GATED.init_vector(), Box(GATED))
    assert not none.any()  # nothing seen, nothing frozen


def test_fits_keep_inert_constants_at_their_start_and_fit_the_rest(refreshed):
    names = refreshed.names()
    r = fit_program(GATED, refreshed, names, "per_model", seed=3, max_evals=200)
    init = dict(zip(GATED.const_names, GATED.init_vector(), strict=True))
    assert r.inert["llama-2-7b"] == ("ar_us", "moe_us")
    assert r.inert["mixtral-8x7b"] == ()
    assert r.groups["llama-2-7b"]["moe_us"] == init["moe_us"]
    assert r.groups["llama-2-7b"]["ar_us"] == init["ar_us"]
    assert r.groups["llama-2-7b"]["eff"] != init["eff"]  # the live ones still move
    assert r.groups["mixtral-8x7b"]["moe_us"] != init["moe_us"]
    start = {g: dict(v, moe_us=77.0) for g, v in r.groups.items()}
    polished = closed_loop_fit(GATED, refreshed, names, "per_model", seed=3, start=start,
                               max_evals=12, width_s=30.0, warmup_s=10.0)
    assert polished.inert["llama-2-7b"] == ("ar_us", "moe_us")
    assert polished.groups["llama-2-7b"]["moe_us"] == 77.0  # the polish's start, exactly
    assert np.isfinite(polished.loss)


def test_a_threshold_silent_only_at_the_start_is_fitted(refreshed):
    """``where(f.x > c.t, e, c.s * e)`` with ``c.s`` = 1 at the start (what the offline
    wrap_where edit writes): both branches agree there, so ``c.t`` moves no step time at
    the start, yet it is live as soon as ``c.s`` moves; it must be fitted, not frozen."""
    wrapped = parse_program(
        'CONSTANTS = {"t": (64.0, 1.0, 512.0), "s": (1.0, 0.5, 2.0)}\n'
        "def step_time(f, c):\n"
        "    return where(f.batch_size > c.t, f.weight_read, c.s * f.weight_read)\n")
    sc = refreshed.scenarios[0]
    got = inert_constants(wrapped, step_model(wrapped), [refreshed.fit_sets[sc.name].features],
                          wrapped.init_vector(), Box(wrapped))
    assert not got.any()
    gated = inert_constants(GATED, step_model(GATED), [refreshed.fit_sets[next(
        s.name for s in refreshed.scenarios if s.model == "llama-2-7b")].features],
        GATED.init_vector(), Box(GATED))
    assert dict(zip(GATED.const_names, gated, strict=True))["moe_us"]  # still frozen


SERVER_QUEUE = parse_program(
    'CONSTANTS = {"eff": (1.0, 0.5, 2.0), "moe_us": (30.0, 0.0, 400.0),\n'
    '             "steps": (1.0, 0.0, 6.0)}\n'
    "def step_time(f, c):\n"
    "    return c.eff * f.weight_read + f.kv_read + 100.0\n"
    "def queueing_time(r, c):\n"
    "    return c.steps * (r.weight_us + c.moe_us * r.layers * r.is_moe)\n")


def test_a_queue_constant_gated_by_the_server_is_inert_only_where_the_gate_is_closed(
        refreshed):
    """`queueing_time` reads the server: judged on the group's queueing delays, a constant
    gated by `r.is_moe` is as silent on a dense model as in `step_time`; without the
    requests, a constant the queue reads is never frozen (the conservative old rule)."""
    from evaluator.api import request_inputs

    model, box = step_model(SERVER_QUEUE), Box(SERVER_QUEUE)
    by_model = {sc.model: sc for sc in refreshed.scenarios}
    for name, moe_inert in (("llama-2-7b", True), ("mixtral-8x7b", False)):
        sc = by_model[name]
        R = request_inputs(sc.input_tokens, sc.output_tokens, sc.arch_vector)
        got = dict(zip(SERVER_QUEUE.const_names, inert_constants(
            SERVER_QUEUE, model, [refreshed.fit_sets[sc.name].features],
            SERVER_QUEUE.init_vector(), box, R), strict=True))
        assert got == {"eff": False, "moe_us": moe_inert, "steps": False}, name
        blind = inert_constants(SERVER_QUEUE, model, [refreshed.fit_sets[sc.name].features],
                                SERVER_QUEUE.init_vector(), box)
        assert not blind.any()
