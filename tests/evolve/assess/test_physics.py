"""Physics checks on synthetic batches: they catch what they claim, and pass sane models."""

from __future__ import annotations

import numpy as np
import pytest

from evaluator.api import probe_batches
from evolve.assess import physics
from evolve.program.codegen import step_model
from evolve.program.language import parse_program

HEAD = 'CONSTANTS = {"a": (1.0, 0.0, 10.0), "b": (100.0, 0.0, 1e4)}\n\ndef step_time(f, c):\n'


def _check(body: str, scenario) -> str | None:
    prog = parse_program(HEAD + "    return " + body + "\n")
    probe = probe_batches(scenario)
    return physics.violation(step_model(prog), prog.init_vector(), probe)


@pytest.fixture(scope="module")
def scenario(small_scenarios):
    return small_scenarios[1]  # Llama-2-70B, TP4


def test_memory_roofline_with_overhead_passes(scenario):
    # KV priced at 1.25 x peak bandwidth: above the measured kernels' 1.0-1.15 x
    assert _check("c.a * (f.weight_read + 1.25 * f.kv_read + f.kv_write) + c.b",
                  scenario) is None


def test_context_priced_below_the_measured_kernels_is_caught(scenario):
    # a large per-step constant keeps the level above the memory floor, but one more
    # token of context costs half of what the decode-attention kernel measures
    why = _check("c.a * (f.weight_read + 0.5 * f.kv_read) + c.b * 200.0", scenario)
    assert why is not None and "measured decode-attention kernel" in why
    assert "decode B=" in why and "+ prefill" not in why
    # the same program with context priced as the kernel measures it passes
    assert _check("c.a * (f.weight_read + 1.2 * f.kv_read) + c.b * 200.0", scenario) is None


def test_context_price_is_the_slope_over_the_measured_kernels(scenario):
    probe = probe_batches(scenario)

    def price(body: str) -> float:
        prog = parse_program(HEAD + "    return " + body + "\n")
        return physics.context_price(step_model(prog), prog.init_vector(), probe)

    # the kernel itself (plus context-free terms) prices context at exactly 1
    assert price("c.a * f.k_dc_attn + f.weight_read + c.b * f.batch_size") == \
        pytest.approx(1.0)
    # twice the kernel is twice; the KV read at peak bandwidth is a little under it
    assert price("2.0 * f.k_dc_attn + c.b") == pytest.approx(2.0)
    kv = price("f.kv_read + c.b")
    assert 0.8 < kv < 1.0
    assert price("3.0 * f.kv_read + c.b") == pytest.approx(3.0 * kv)
    # context-blind: 0
    assert price("c.a * f.weight_read + c.b * f.batch_size") == 0.0


def test_a_program_blind_to_context_undercuts_the_floor(scenario):
    why = _check("c.a * f.kv_write + c.b * 2.0", scenario)
    assert why is not None and "undercuts the physical floor" in why and "L=4000" in why


def test_step_time_falling_with_context_is_caught(scenario):
    why = _check("c.a * (f.weight_read + f.kv_read) + c.b * 1000.0 / (1.0 + f.kv_max)",
                 scenario)
    assert why is not None and "falls with more context" in why


def test_step_time_falling_with_tokens_is_caught(scenario):
    why = _check("c.a * (f.weight_read + f.kv_read) + where(f.n_prefill > 0.5, 0.0, c.b)",
                 scenario)
    assert why is not None and "falls with more scheduled tokens" in why


def test_non_positive_step_time_is_caught(scenario):
    why = _check("c.a * f.kv_read - c.b * 1e3", scenario)
    assert why is not None and "not finite, positive and below" in why


def test_check_names_the_model_and_skips_unfitted_models(small_scenarios):
    prog = parse_program(HEAD + "    return c.a * f.kv_write + c.b\n")
    probes = {s.model: probe_batches(s) for s in small_scenarios}
    model = step_model(prog)
    why = physics.check(model, {m: prog.init_vector() for m in probes}, probes)
    assert why is not None and why.startswith("physics (")
    assert physics.check(model, {}, probes) is None
    floor = physics.physical_floor(probes[small_scenarios[0].model].features)
    assert np.all(floor > 0)
