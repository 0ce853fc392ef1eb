"""The CMA-ES driver on analytic objectives: it finds minima, restarts only on failure,
is deterministic per seed, handles one dimension, and accounts for every evaluation."""

from __future__ import annotations

from typing import Any

import cma
import numpy as np
import pytest

from evolve.fitting import PENALTY, Box, Minimum, PopulationObjective, minimize
from evolve.fitting.cmaes import UnitBox
from evolve.program.language import Program, parse_program

TARGET = np.array([2.5, 7.0, 4.2])


def _program(n: int) -> Program:
    consts = ", ".join(f'"c{i}": (5.0, 0.0, 10.0)' for i in range(n))
    terms = " + ".join(f"c.c{i}" for i in range(n))
    return parse_program(f"CONSTANTS = {{{consts}}}\ndef step_time(f, c):\n"
                         f"    return f.weight_read + {terms}\n")


class Recorder:
    """A population objective that remembers every row it was asked about."""

    def __init__(self, fn: PopulationObjective) -> None:
        self.fn = fn
        self.rows: list[np.ndarray] = []

    def __call__(self, X: np.ndarray) -> np.ndarray:
        assert X.ndim == 2
        self.rows.extend(np.array(x) for x in X)
        return self.fn(X)


def _sphere(target: np.ndarray) -> PopulationObjective:
    return lambda X: ((X - target) ** 2).sum(axis=1)


def _run(n: int = 3, fn: PopulationObjective | None = None,
         **kw: Any) -> tuple[Minimum, Recorder]:
    p = _program(n)
    obj = Recorder(fn or _sphere(TARGET[:n]))
    opts: dict[str, Any] = {"seed": 3, "label": "global", "max_evals": 1500, "sigma0": 0.1,
            "tolerances": {"tolfun": 1e-12, "tolx": 1e-9}} | kw
    return minimize(obj, Box(p), p.init_vector(), **opts), obj


def test_finds_the_minimum_of_a_shifted_sphere():
    m, obj = _run()
    assert m.status == "ok" and m.f0 == pytest.approx(((5.0 - TARGET) ** 2).sum())
    np.testing.assert_allclose(m.x, TARGET, atol=1e-3)
    assert m.f < 1e-6 and m.n_evals == len(obj.rows) <= 1500


def test_one_dimension_works():
    m, _ = _run(n=1)
    assert m.status == "ok" and m.x.shape == (1,)
    assert m.x[0] == pytest.approx(TARGET[0], abs=1e-4)


def test_deterministic_per_seed_and_label():
    state = np.random.get_state()[1].copy()
    a, _ = _run(max_evals=200)
    b, _ = _run(max_evals=200)
    assert a.x.tolist() == b.x.tolist() and a.f == b.f and a.n_evals == b.n_evals
    assert np.array_equal(np.random.get_state()[1], state)  # global RNG untouched
    assert _run(max_evals=200, seed=4)[0].x.tolist() != a.x.tolist()
    assert _run(max_evals=200, label="closed:global")[0].x.tolist() != a.x.tolist()


def test_restarts_only_on_failure():
    ok0, _ = _run(max_evals=300, restarts=0)
    ok2, _ = _run(max_evals=300, restarts=2)
    assert ok0.status == "ok"
    assert (ok2.x.tolist(), ok2.n_evals) == (ok0.x.tolist(), ok0.n_evals)  # no restart
    # a flat objective: no improvement, so every restart runs (each stops on flatness)
    flat = lambda X: np.ones(X.shape[0])  # noqa: E731
    f0, _ = _run(fn=flat, restarts=0)
    f2, _ = _run(fn=flat, restarts=2)
    assert f0.status == f2.status == "no_improvement"
    assert f2.n_evals > f0.n_evals > 1
    assert f2.x.tolist() == f0.x.tolist()  # nothing beat the start
    # no valid point anywhere: the same, reported as invalid
    bad = lambda X: np.full(X.shape[0], PENALTY)  # noqa: E731
    i0, _ = _run(fn=bad, restarts=0)
    i2, _ = _run(fn=bad, restarts=2)
    assert i0.status == i2.status == "invalid" and i2.f == PENALTY
    assert i2.n_evals > i0.n_evals


def test_budget_counts_the_start_and_whole_generations():
    m, obj = _run(max_evals=30, restarts=5)
    popsize = 4 + int(3 * np.log(3))  # cma's default for n = 3
    assert m.n_evals == len(obj.rows) and 30 <= m.n_evals < 30 + popsize
    m1, obj1 = _run(max_evals=1)
    assert m1.n_evals == len(obj1.rows) == 1 and m1.status == "no_improvement"


def test_best_is_the_first_minimum_and_the_start_is_snapped_or_exact():
    start_first = lambda X: np.where(np.arange(X.shape[0]) == 0, 1.0, 0.5)  # noqa: E731
    # the start scores 1.0 (row 0 of its own call); every candidate ties at 0.5
    m, obj = _run(fn=start_first, max_evals=40)
    # the first 0.5 of generation 1 (its row 0 scored 1.0, as the start did); later ties
    # never replace it
    assert m.f == 0.5 and m.x.tolist() == obj.rows[2].tolist()
    p = _program(2)
    odd = np.array([3.3, 0.1 + 0.2])
    flat = Recorder(lambda X: np.ones(X.shape[0]))
    exact = minimize(flat, Box(p), odd, seed=1, label="g", max_evals=20, sigma0=0.08,
                     snap_start=False)
    assert exact.x.tolist() == odd.tolist() and flat.rows[0].tolist() == odd.tolist()
    snapped = minimize(flat, Box(p), odd, seed=1, label="g", max_evals=20, sigma0=0.08)
    box = Box(p)
    assert snapped.x.tolist() == box.from_unit(box.to_unit(odd)).tolist()


def test_no_constants_evaluates_the_start_only():
    p = parse_program("CONSTANTS = {}\ndef step_time(f, c):\n    return f.weight_read\n")
    obj = Recorder(lambda X: np.full(X.shape[0], 0.25))
    m = minimize(obj, Box(p), p.init_vector(), seed=1, label="g", max_evals=50, sigma0=0.1)
    assert (m.n_evals, m.f, m.status, m.x.shape) == (1, 0.25, "no_improvement", (0,))


def test_fixed_coordinates_stay_at_the_start_in_every_evaluated_row():
    fixed = np.array([False, True, False])
    m, obj = _run(fixed=fixed)
    start = _program(3).init_vector()
    assert all(row[1] == start[1] for row in obj.rows)
    np.testing.assert_allclose(m.x[[0, 2]], TARGET[[0, 2]], atol=1e-3)
    assert m.x[1] == start[1]
    one_left, _ = _run(fixed=np.array([True, True, False]))  # one live dimension: padded
    assert one_left.x[2] == pytest.approx(TARGET[2], abs=1e-4)
    none_left, obj = _run(fixed=np.ones(3, dtype=bool))
    assert none_left.n_evals == 1 and len(obj.rows) == 1 and none_left.status == "no_improvement"


@pytest.mark.parametrize("start", [[0.5, 0.2, 0.7], [0.001, 0.5, 0.999], [0.04, 0.96, 0.3]])
def test_the_unit_box_asks_and_adapts_exactly_as_cma_with_bounds(start: list[float]) -> None:
    """The driver runs cma without ``bounds`` and maps each generation through
    :class:`UnitBox`: every point asked, and the state cma ends in, must equal cma's own
    bounded run bit for bit (starts in the box's quadratic margins included), or fits
    would silently change."""

    def es(opts: dict[str, Any], x0: list[float]) -> Any:
        rng = np.random.default_rng(11)
        base = {"seed": np.nan, "verbose": -9, "verb_log": 0, "verb_disp": 0,
                "randn": lambda lam, k: rng.standard_normal((lam, k))}
        return cma.CMAEvolutionStrategy(x0, 0.3, base | opts)

    def f(U: np.ndarray) -> list[float]:  # minimum on the box's edge: the margins matter
        return [float(v) for v in ((U - np.array([0.0, 0.6, 1.0])) ** 2).sum(axis=1)]

    unit = UnitBox()
    bounded = es({"bounds": [0.0, 1.0]}, start)
    free = es({"maxstd": unit.maxstd(3)}, list(unit.genotype(np.array(start))))
    for _ in range(60):
        want = np.asarray(bounded.ask())
        genotypes = free.ask()
        got = unit(np.asarray(genotypes))
        assert np.array_equal(got, want)
        bounded.tell(list(want), f(want))
        free.tell(genotypes, f(got))
    assert np.array_equal(bounded.mean, free.mean) and bounded.sigma == free.sigma
    assert np.array_equal(bounded.sm.C, free.sm.C)
