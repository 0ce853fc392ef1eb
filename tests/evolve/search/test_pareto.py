"""NSGA-II rank/crowding, tournament selection and the frontier pick rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evolve.search.grid import Elite
from evolve.search.pareto import Frontier, rank_and_crowding, select_parents


def _e(pid: str, loss: float, cx: int) -> Elite:
    return Elite(program_id=pid, loss=loss, complexity=cx, n_features=1, generation=0)


def test_ranks_known_fronts() -> None:
    objs = [[1, 5], [2, 3], [3, 1], [2, 5], [3, 4], [4, 4], [5, 5]]
    rank, crowd = rank_and_crowding(objs)
    assert rank.tolist() == [0, 0, 0, 1, 1, 2, 3]
    # front 0 ends are infinitely crowded; the middle point: ((3-1)/2 + (5-1)/4) / 2 = 1
    assert math.isinf(crowd[0]) and math.isinf(crowd[2])
    assert crowd[1] == pytest.approx(1.0)
    assert np.isinf(crowd[3:]).all()  # fronts of <= 2 points


def test_rank_handles_duplicates_inf_and_empty() -> None:
    rank, crowd = rank_and_crowding([[0.1, 3], [0.1, 3], [math.inf, 1], [0.2, 5]])
    assert rank.tolist() == [0, 0, 0, 1]
    assert np.all(~np.isnan(crowd))
    r0, c0 = rank_and_crowding(np.zeros((0, 2)))
    assert r0.shape == (0,) and c0.shape == (0,)


def _pool() -> list[Elite]:
    return [_e("a", 0.10, 20), _e("b", 0.20, 8), _e("c", 0.40, 3), _e("d", 0.30, 10),
            _e("e", 0.50, 12), _e("f", 0.12, 25), _e("g", 0.60, 2)]


def test_tournament_is_deterministic_and_order_free() -> None:
    pool = _pool()
    a = select_parents(pool, np.random.default_rng(3), 50)
    b = select_parents(pool, np.random.default_rng(3), 50)
    c = select_parents(list(reversed(pool)), np.random.default_rng(3), 50)
    assert a == b == c and len(a) == 50
    assert a != select_parents(pool, np.random.default_rng(4), 50)


def test_tournament_prefers_first_front() -> None:
    pool = _pool()  # d (0.3, 10) and e (0.5, 12) are dominated by b (0.2, 8)
    picks = select_parents(pool, np.random.default_rng(0), 2000)
    counts = {e.program_id: sum(p.program_id == e.program_id for p in picks) for e in pool}
    # a dominated elite wins only against itself or the other dominated one
    assert counts["d"] + counts["e"] < 0.15 * len(picks)
    assert min(counts[k] for k in "abcfg") > counts["d"]


def test_tournament_edge_cases() -> None:
    one = [_e("x", 0.3, 4)]
    assert select_parents(one, np.random.default_rng(0), 3) == one * 3
    assert select_parents(one, np.random.default_rng(0), 0) == []
    with pytest.raises(ValueError):
        select_parents([], np.random.default_rng(0), 2)


def _frontier_elites() -> list[Elite]:
    return [_e("p1", 1.0, 1), _e("p3", 0.5, 3), _e("p5", 0.45, 5), _e("p8", 0.44, 8),
            _e("q4", 0.6, 4), _e("q3", 0.7, 3), _e("q9", 0.44, 9), _e("inf", math.inf, 1)]


def test_frontier_members_and_scores() -> None:
    fr = Frontier.from_elites(_frontier_elites())
    assert [e.program_id for e in fr] == ["p1", "p3", "p5", "p8"]
    s = fr.scores
    assert s[0] == 0.0
    assert s[1] == pytest.approx(-math.log(0.5 / 1.0) / 2)
    assert s[2] == pytest.approx(-math.log(0.45 / 0.5) / 2)
    assert s[3] == pytest.approx(-math.log(0.44 / 0.45) / 3)
    assert [r[0] for r in fr.rows()] == [1, 3, 5, 8]


def test_frontier_pick_rule() -> None:
    elites = _frontier_elites()
    # limit 1.5 * 0.44 = 0.66: p3, p5, p8 qualify; p3 bought the most per complexity
    assert Frontier.from_elites(elites).pick().program_id == "p3"
    # limit 1.1 * 0.44 = 0.484: p5, p8 qualify; p5 has the higher score
    assert Frontier.from_elites(elites, tolerance=1.1).pick().program_id == "p5"
    # only the most accurate qualifies
    assert Frontier.from_elites(elites, tolerance=1.0).pick().program_id == "p8"
    assert Frontier.from_elites([]).pick() is None
    assert Frontier.from_elites([_e("solo", 0.3, 7)]).pick().program_id == "solo"


def test_frontier_ties_and_rule_text() -> None:
    fr = Frontier.from_elites([_e("zz", 0.2, 4), _e("aa", 0.2, 4), _e("bb", 0.2, 6)])
    assert [e.program_id for e in fr] == ["aa"]  # equal objectives: smallest id; bb dominated
    rule = Frontier.from_elites([], tolerance=1.25).rule
    assert "1.25" in rule and "dlog(loss)/dcomplexity" in rule
    with pytest.raises(ValueError):
        Frontier.from_elites([], tolerance=0.5)
