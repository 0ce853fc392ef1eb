"""MAP-Elites grid: best per cell, order independence, storage round trip, stats."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evolve.search.grid import DEFAULT_COMPLEXITY_EDGES, Elite, Grid


def _e(pid: str, loss: float, cx: int = 5, nf: int = 2, gen: int = 0) -> Elite:
    return Elite(program_id=pid, loss=loss, complexity=cx, n_features=nf, generation=gen)


def test_keeps_lowest_loss_per_cell() -> None:
    g = Grid()
    assert g.try_insert(_e("a", 0.5))
    assert g.try_insert(_e("b", 0.3))  # same cell, better
    assert not g.try_insert(_e("c", 0.4))  # same cell, worse than b
    assert g.try_insert(_e("d", 0.9, cx=20))  # other cell
    assert [e.program_id for e in g.elites()] == ["b", "d"]
    assert g.get(g.cell_of(5, 2)).program_id == "b"
    assert len(g) == 2 and "b" in g and "a" not in g


def test_ties_broken_by_program_id_then_generation() -> None:
    g = Grid()
    assert g.try_insert(_e("bbb", 0.2))
    assert g.try_insert(_e("aaa", 0.2))
    assert not g.try_insert(_e("ccc", 0.2))
    assert not g.try_insert(_e("aaa", 0.2, gen=3))  # same program, later generation
    assert g.elites()[0] == _e("aaa", 0.2)


def test_non_finite_loss_never_inserted() -> None:
    g = Grid()
    assert not g.try_insert(_e("a", math.inf))
    assert not g.try_insert(_e("b", math.nan))
    assert len(g) == 0 and g.best() is None


def test_final_content_is_order_independent() -> None:
    rng = np.random.default_rng(7)
    elites = [_e(f"p{i:03d}", float(rng.choice([0.1, 0.2, 0.3, rng.random()])),
                 cx=int(rng.integers(0, 35)), nf=int(rng.integers(0, 25)),
                 gen=int(rng.integers(0, 3)))
              for i in range(300)]
    reference = None
    for trial in range(10):
        order = rng.permutation(len(elites)) if trial else np.arange(len(elites))
        g = Grid()
        for i in order:
            g.try_insert(elites[int(i)])
        if reference is None:
            reference = g.cells()
        assert g.cells() == reference
    # every held elite is the minimum of its cell over all inserted elites
    g = Grid()
    for e in elites:
        g.try_insert(e)
    for cell, held in g.cells():
        rivals = [e for e in elites if g.cell_of(e.complexity, e.n_features) == cell]
        assert held == min(rivals, key=Elite.key)


def test_cell_of_bins_and_clipping() -> None:
    g = Grid(complexity_edges=(1, 4, 7, 31), max_features=5)
    assert g.shape == (3, 6) and g.n_cells == 18
    assert g.cell_of(0, 0) == (0, 0)  # below the first edge: bin 0
    assert g.cell_of(3, 2) == (0, 2)
    assert g.cell_of(4, 2) == (1, 2)
    assert g.cell_of(30, 9) == (2, 5)  # features clip to max_features
    assert g.cell_of(99, 1) == (2, 1)  # above the last edge: last bin
    with pytest.raises(ValueError):
        Grid(complexity_edges=(1, 1, 5))
    with pytest.raises(ValueError):
        Grid(complexity_edges=(3,))


def test_cells_round_trip_and_mismatch() -> None:
    g = Grid()
    for i, (loss, cx, nf) in enumerate([(0.3, 2, 1), (0.2, 9, 3), (0.5, 29, 7)]):
        g.try_insert(_e(f"id{i}", loss, cx, nf, gen=i))
    restored = Grid.from_cells(g.cells())
    assert restored.cells() == g.cells()
    assert restored.stats() == g.stats()
    with pytest.raises(ValueError):  # stored under other bin edges
        Grid.from_cells(g.cells(), complexity_edges=(1, 2, 31))
    cell, elite = g.cells()[0]
    with pytest.raises(ValueError):
        Grid.from_cells([(cell, elite), (cell, elite)])


def test_stats() -> None:
    g = Grid()
    s0 = g.stats()
    assert s0.n_elites == 0 and s0.coverage == 0 and s0.best_id is None
    assert s0.best_loss == math.inf
    g.try_insert(_e("a", 0.25, cx=2))
    g.try_insert(_e("b", 1.5, cx=12))  # worse than the reference: adds 0 to the QD score
    s = g.stats()
    n_cells = (len(DEFAULT_COMPLEXITY_EDGES) - 1) * (g.max_features + 1)
    assert s.n_cells == n_cells
    assert s.coverage == pytest.approx(2 / n_cells)
    assert s.qd_score == pytest.approx(0.75)
    assert s.best_id == "a" and s.best_loss == 0.25
