"""Offline operator: determinism, validity under the language, diversity, caps, cleanup."""

from __future__ import annotations

import ast
from collections import Counter

import numpy as np
import pytest

from evolve.operators.base import Parent, Proposal
from evolve.operators.offline import ast_edit
from evolve.operators.offline.operator import DEFAULT_WEIGHTS, MAX_NOTES, OfflineOperator
from evolve.program.language import parse_program

SEEDS = [
    '''"""Roofline: compute or memory bound, plus a fixed overhead."""
CONSTANTS = {"a": (1.0, 0.1, 10.0), "b": (1.0, 0.1, 10.0), "overhead": (50.0, 0.0, 1000.0)}

def step_time(f, c):
    compute = c.a * (f.pf_gemm + f.dc_gemm + f.pf_attn + f.dc_attn)
    memory = c.b * (f.weight_read + f.kv_read)
    return maximum(compute, memory) + c.overhead
''',
    '''"""Linear in tokens, with an E2E-only post-decode offset."""
CONSTANTS = {"a": (100.0, 0.0, 10000.0), "per_tok": (0.1, 0.0, 10.0),
             "post_decode_us": (0.0, 0.0, 1000.0)}

def step_time(f, c):
    return c.a + c.per_tok * (f.prefill_tokens + f.decode_tokens)
''',
    '''"""Regimes by batch size, with a queueing delay."""
CONSTANTS = {"t": (64.0, 1.0, 512.0), "lo": (1.0, 0.0, 10.0), "hi": (2.0, 0.0, 10.0),
             "q": (10.0, 0.0, 1000.0)}

def step_time(f, c):
    work = f.pf_gemm + f.dc_gemm + sqrt(f.kv_read)
    return where(f.batch_size > c.t, c.hi * work, c.lo * work) + 20.0

def queueing_time(r, c):
    return c.q + 0.0 * r.input_tokens
''',
    '''"""Tiny."""
CONSTANTS = {"a": (5.0, 0.0, 100.0)}

def step_time(f, c):
    return c.a + f.dc_gemm
''',
]


def _parents(sources: list[str] = SEEDS) -> list[Parent]:
    return [Parent(parse_program(s), {}, 0.1, {}) for s in sources]


def _evolve(op: OfflineOperator, seed: int, steps: int) -> list[Proposal]:
    """A chain: each valid child may become a parent, so edits compound over generations."""
    rng = np.random.default_rng(seed)
    population = _parents()
    out: list[Proposal] = []
    for _ in range(steps // 10):
        idx = rng.choice(len(population), size=min(3, len(population)), replace=False)
        props = op.propose([population[int(i)] for i in idx], population[:2], rng, 10)
        out += props
        for p in props:
            if p.source is not None:
                population.append(Parent(parse_program(p.source), {}, 0.1, {}))
        population = population[-30:]
    return out


def _key(props: list[Proposal]) -> list[tuple]:
    return [(p.source, p.operator, p.parent_ids, p.error) for p in props]


def test_seeds_are_valid_programs() -> None:
    for s in SEEDS:
        parse_program(s)


@pytest.mark.slow
def test_500_mutations_deterministic_valid_and_diverse() -> None:
    op = OfflineOperator()
    a = _evolve(op, 11, 500)
    b = _evolve(OfflineOperator(), 11, 500)
    assert len(a) == 500 and _key(a) == _key(b)
    assert _key(a) != _key(_evolve(op, 12, 500))
    ok = [p for p in a if p.source is not None]
    assert len(ok) >= 0.9 * len(a)
    for p in ok:
        ast.parse(p.source)
        program = parse_program(p.source)
        assert program.complexity <= 30 and program.n_where <= 3
        assert len(program.constants) <= 10
        # the operator's own count agrees with the language's
        assert ast_edit.parts_complexity(ast_edit.split_module(p.source)) == program.complexity
        assert p.operator.startswith("offline:") and p.error is None
    kinds = Counter(p.operator for p in ok)
    assert set(kinds) == {f"offline:{k}" for k in DEFAULT_WEIGHTS}
    assert all(p.error and p.source is None for p in a if p not in ok)
    crossovers = [p for p in ok if p.operator == "offline:crossover"]
    assert all(len(p.parent_ids) == 2 and p.parent_ids[0] != p.parent_ids[1]
               for p in crossovers)


def test_tight_caps_respected() -> None:
    op = OfflineOperator(max_complexity=12, max_where=1, max_constants=5)
    props = _evolve(op, 5, 300)
    ok = [p for p in props if p.source is not None]
    assert len(ok) > 100
    for p in ok:
        prog = parse_program(p.source)
        assert prog.complexity <= 12 and prog.n_where <= 1 and len(prog.constants) <= 5
    # the roofline seed is at complexity 11: growth must be refused or shrink first
    assert any(p.error and "cap" in p.error for p in props) or len(ok) == len(props)


def test_error_when_no_edit_fits() -> None:
    op = OfflineOperator(weights={k: 0.0 for k in DEFAULT_WEIGHTS if k != "add_term"},
                         max_constants=3)
    props = op.propose(_parents([SEEDS[0]]), [], np.random.default_rng(0), 4)
    assert all(p.source is None and "constant cap" in p.error for p in props)
    assert all(p.parent_ids == (parse_program(SEEDS[0]).id,) for p in props)


def test_drop_term_removes_unused_constants_keeps_reserved() -> None:
    op = OfflineOperator(weights={k: 0.0 for k in DEFAULT_WEIGHTS if k != "drop_term"})
    rng = np.random.default_rng(1)
    for parent in _parents([SEEDS[1]]) * 20:
        (p,) = op.propose([parent], [], rng, 1)
        parts = ast_edit.split_module(p.source)
        used = ast_edit.const_refs(parts.step_fn())
        assert set(parts.constants) == {*used, "post_decode_us"}
        assert "post_decode_us" in parse_program(p.source).const_names


def test_add_term_constant_starts_neutral() -> None:
    op = OfflineOperator(weights={k: 0.0 for k in DEFAULT_WEIGHTS if k != "add_term"})
    (parent,) = _parents([SEEDS[3]])
    for p in op.propose([parent], [], np.random.default_rng(2), 30):
        parts = ast_edit.split_module(p.source)
        (new,) = [k for k in parts.constants if k != "a"]
        init, low, high = parts.constants[new]
        assert init == 0.0 and low == 0.0 and high in (10.0, 1000.0)
        assert f"c.{new} * f." in p.source


def test_crossover_renames_clashing_constants() -> None:
    op = OfflineOperator(weights={k: 0.0 for k in DEFAULT_WEIGHTS if k != "crossover"})
    roofline, linear = _parents([SEEDS[0], SEEDS[1]])
    seen_rename = False
    for p in op.propose([roofline], [linear], np.random.default_rng(3), 40):
        assert p.parent_ids == (roofline.program.id, linear.program.id)
        prog = parse_program(p.source)
        if "per_tok" in p.source or "a_1" in prog.const_names:
            # the linear program's "a" (100, 0, 1e4) never overwrites the roofline's "a"
            consts = dict(ast_edit.split_module(p.source).constants)
            if "a" in consts:
                assert consts["a"] == (1.0, 0.1, 10.0)
            if "a_1" in consts:
                assert consts["a_1"] == (100.0, 0.0, 10000.0)
                seen_rename = True
    assert seen_rename


def test_docstring_keeps_idea_and_bounded_notes() -> None:
    op = OfflineOperator()
    rng = np.random.default_rng(4)
    (parent,) = _parents([SEEDS[0]])
    for _ in range(12):
        (p,) = op.propose([parent], [], rng, 1)
        if p.source is not None:
            parent = Parent(parse_program(p.source), {}, 0.1, {})
    doc = parent.program.doc
    assert doc.startswith("Roofline: compute or memory bound")
    notes = [ln for ln in doc.splitlines() if ln.startswith("offline:")]
    assert 1 <= len(notes) <= MAX_NOTES


def test_warm_start_uses_fitted_constants() -> None:
    op = OfflineOperator(weights={k: 0.0 for k in DEFAULT_WEIGHTS if k != "swap_feature"},
                         warm_start=True)
    prog = parse_program(SEEDS[3])
    parent = Parent(prog, {"llama": {"a": 7.0}, "qwen": {"a": 9.0}, "mix": {"a": 500.0}},
                    0.1, {})
    (p,) = op.propose([parent], [], np.random.default_rng(0), 1)
    assert ast_edit.split_module(p.source).constants["a"] == (9.0, 0.0, 100.0)


def test_rejects_unknown_kind_and_empty_parents() -> None:
    with pytest.raises(ValueError):
        OfflineOperator(weights={"teleport": 1.0})
    with pytest.raises(ValueError):
        OfflineOperator().propose([], [], np.random.default_rng(0), 1)
