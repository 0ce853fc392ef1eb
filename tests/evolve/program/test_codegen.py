"""Code generation (evolve.program.codegen): the numpy (vector) and numba (scalar) forms of a
program
agree on random features for every seed, numeric guards reject bad output without crashing,
compiled models are cached by program id, and the generated code names only what the
whitelist allows."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from program_text import GOOD, prog

from evaluator.api import MAX_STEP_US, step_time_problem
from evaluator.features.glossary import FEATURE_INDEX, N_FEATURES
from evolve.program.codegen import step_model
from evolve.program.language import parse_program


def sample_features(n: int = 400, seed: int = 0) -> np.ndarray:
    """Random but plausible features: non-negative, with zeros (idle phases)."""
    rng = np.random.default_rng(seed)
    F = rng.lognormal(mean=3.0, sigma=2.0, size=(N_FEATURES, n))
    F[:, rng.random(n) < 0.2] = 0.0
    F[FEATURE_INDEX["tp"]] = rng.choice([1.0, 2.0, 4.0], n)
    F[FEATURE_INDEX["layers"]] = rng.choice([32.0, 80.0], n)
    F[FEATURE_INDEX["pf_gemm"], rng.random(n) < 0.3] = 0.0
    return F


PARITY = [
    GOOD,
    prog("return (c.a * f.pf_gemm ** 2.0 + f.dc_attn ** 0.5) ** (1.0 / c.p) + 1.0",
         'CONSTANTS = {"a": (1.0, 0.1, 5.0), "p": (2.0, 1.0, 4.0)}\n'),
    prog("x = log(f.kv_read + 1.0) * exp(-f.batch_size / 100.0)\n"
         "y = where(x >= c.a, minimum(x, f.kv_max), clip(x, c.a, 3.0))\n"
         "z = where(f.n_decode <= 3.0, y / (f.tp + 0.5), -y)\n"
         "return abs(z) + maximum(f.moe_gemm, 2.0) - minimum(f.is_moe, 0.5) + c.a"),
    prog("return f.tp ** -2.0 + sqrt(f.prefill_tokens) * c.a + log1p(f.kv_sum) + 1.0"),
    prog("return 7.5"),
    *sorted(str(p) for p in (Path(__file__).resolve().parents[3] / "seeds").glob("*.py")),
]


def _source(item: str) -> str:
    return Path(item).read_text() if item.endswith(".py") else item


@pytest.mark.parametrize("item", PARITY, ids=[Path(s).stem if s.endswith(".py")
                                                else f"prog{i}" for i, s in enumerate(PARITY)])
def test_vector_scalar_parity(item):
    p = parse_program(_source(item))
    model = step_model(p)
    F = sample_features()
    lo, hi = p.bounds()
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no floating-point warning may escape
        for c in (p.init_vector(), lo + rng.random(p.n_constants) * (hi - lo)):
            v = model.vector_fn(F, c)
            assert v.shape == (F.shape[1],) and v.dtype == np.float64
            s = np.array([model.scalar_fn(np.ascontiguousarray(F[:, j]), c)
                          for j in range(F.shape[1])])
            both = np.isfinite(v) & np.isfinite(s)
            assert np.array_equal(np.isfinite(v), np.isfinite(s))
            np.testing.assert_allclose(s[both], v[both], rtol=1e-12, atol=0.0)


def test_population_batch_matches_single_calls():
    p = parse_program(PARITY[2])
    model = step_model(p)
    F = sample_features(50)
    C = np.stack([p.init_vector(), p.init_vector() * 1.5, p.init_vector() * 0.1])
    batch = model.vector_fn(F, np.ascontiguousarray(C.T)[:, :, None])
    assert batch.shape == (3, 50)
    for i in range(3):
        np.testing.assert_array_equal(batch[i], model.vector_fn(F, C[i]))


@pytest.mark.parametrize(("body", "why"), [
    ("return f.pf_gemm / 0.0", "not finite"),
    ("return 1.0 / 0.0 + c.a", "not finite"),
    ("return c.a / (f.n_prefill - f.n_prefill)", "not finite"),
    ("return sqrt(-1.0 - f.tp)", "not finite"),
    ("return log(f.tp - f.tp)", "not finite"),
    ("return exp(f.kv_sum * 1000.0)", "not finite"),
    ("return 0.0 ** -2.0 + c.a", "not finite"),
    ("return (-8.0) ** 0.5 + c.a", "not finite"),
    ("return c.a - 100.0", "not finite, positive"),
    ("return c.a * 1e12", "below 1e+12"),
])
def test_numeric_guards_reject_without_crashing(body, why):
    p = parse_program(prog(body))  # statically fine
    model = step_model(p)
    F = sample_features(64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = model.vector_fn(F, p.init_vector())
        reason = step_time_problem(t)
        scalar = model.scalar_fn(np.ascontiguousarray(F[:, 0]), p.init_vector())
    assert reason is not None and why in reason, reason
    assert isinstance(scalar, float)


def test_step_time_problem_accepts_good_and_reports_step():
    assert step_time_problem(np.array([1.0, 2.0])) is None
    assert step_time_problem(np.array([])) is None
    assert "step 1" in step_time_problem(np.array([1.0, np.nan, 3.0]))
    assert "step 2" in step_time_problem(np.array([1.0, 2.0, 0.0]))
    assert "step 0" in step_time_problem(np.array([MAX_STEP_US, 2.0]))


def test_step_model_cached_by_id():
    p = parse_program(GOOD)
    reformatted = "# a comment\n" + p.source.replace(" + ", "+")
    assert reformatted != GOOD and parse_program(reformatted).id == p.id
    assert step_model(parse_program(reformatted)) is step_model(p)


def test_generated_code_names_only_whitelisted_globals():
    from evolve.program.codegen import compile_program

    p = parse_program(PARITY[2])
    comp = compile_program(p)
    import ast

    for src, allowed in ((comp.vector_source, {"np"}),
                         (comp.scalar_source, {"math", "abs", "_maximum", "_minimum"})):
        tree = ast.parse(src)
        fn = tree.body[0]
        assigned = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                    and isinstance(n.ctx, ast.Store)}
        loaded = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Load)}
        free = loaded - assigned - {"F", "C"}
        assert all(n in allowed or (n.startswith("k") and n[1:].isdigit()) for n in free), free
        assert not any(isinstance(n, ast.Attribute) and n.attr.startswith("_")
                       for n in ast.walk(fn))


def test_reads_kernels_skips_only_what_the_program_cannot_see(small_scenarios):
    """``reads_kernels`` is False only for a program reading no measured-kernel feature;
    the simulator then leaves the kernel tables out, which changes nothing for it, and
    would change the run of a program that reads them (so the flag is not decorative)."""
    import dataclasses

    from evaluator.features.components import ARCH_FIELDS
    from evaluator.sim.simulator import simulate

    seeds = Path(__file__).resolve().parents[3] / "seeds"
    plain_p = parse_program((seeds / "anchored.py").read_text())
    kern_p = parse_program((seeds / "kernels.py").read_text())
    plain, kern = step_model(plain_p), step_model(kern_p)
    assert kern.reads_kernels and not plain.reads_kernels
    sc = small_scenarios[0]
    assert sc.arch_vector.shape[0] > len(ARCH_FIELDS)  # tables present, so a skip is real
    x = plain_p.init_vector()
    full = simulate(sc, dataclasses.replace(plain, reads_kernels=True), x).corpus
    assert simulate(sc, plain, x).corpus.digest() == full.digest()
    kx = kern_p.init_vector()
    blind = simulate(sc, dataclasses.replace(kern, reads_kernels=False), kx).corpus
    assert blind.digest() != simulate(sc, kern, kx).corpus.digest()
