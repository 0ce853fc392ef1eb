"""Teacher-forced fitting: the fast objective equals the evaluator's loss, fits are
deterministic, reduce the loss, respect bounds and scopes, and survive programs with
invalid outputs."""

from __future__ import annotations

import numpy as np
import pytest
from fit_helpers import ALWAYS_INVALID, seed_program, slow_roofline

from evaluator.api import loss
from evolve.fitting import PENALTY, Box, GroupObjective, const_map, fit_program, group_key
from evolve.program.codegen import step_model
from evolve.program.language import Program, parse_program


def _random_constants(p: Program, n: int, seed: int) -> np.ndarray:
    lo, hi = p.bounds()
    rng = np.random.default_rng(seed)
    return np.vstack([p.init_vector(), lo + rng.random((n, p.n_constants)) * (hi - lo)])


@pytest.mark.parametrize("name", ["trained_physics", "roofline", "regime"])
def test_fast_objective_equals_evaluator_loss(refreshed, name):
    p = seed_program(name)
    model = step_model(p)
    names = refreshed.names()
    obj = GroupObjective(p, model, refreshed, [refreshed.by_name[n] for n in names])
    X = _random_constants(p, 5, 3)
    fast = obj(X)
    for i, x in enumerate(X):
        ref = loss(refreshed.score(model, {n: x for n in names}, names), names)
        if np.isfinite(ref):
            assert fast[i] == pytest.approx(ref, rel=1e-9)
        else:
            assert fast[i] == PENALTY


def test_invalid_constants_get_the_penalty(refreshed):
    p = parse_program('CONSTANTS = {"a": (1.0, -5.0, 5.0)}\n'
                      "def step_time(f, c):\n    return c.a * (f.weight_read + 1.0)\n")
    names = refreshed.names()
    obj = GroupObjective(p, step_model(p), refreshed, [refreshed.by_name[n] for n in names])
    got = obj(np.array([[1.0], [-1.0], [0.0]]))
    assert got[0] < PENALTY and got[1] == PENALTY and got[2] == PENALTY


def test_fit_is_deterministic_and_reduces_loss(refreshed):
    p = seed_program("trained_physics")
    names = refreshed.names()
    state = np.random.get_state()[1].copy()
    a = fit_program(p, refreshed, names, "global", seed=11, max_evals=250)
    b = fit_program(p, refreshed, names, "global", seed=11, max_evals=250)
    assert a.groups == b.groups  # bit for bit: float equality of every constant
    assert a.loss == b.loss and a.n_evals == b.n_evals
    assert np.array_equal(np.random.get_state()[1], state)  # global RNG untouched
    assert a.status == "ok"
    assert a.loss < a.init_loss
    c = fit_program(p, refreshed, names, "global", seed=12, max_evals=250)
    assert c.groups != a.groups


def test_fit_recovers_from_poor_initial_constants(refreshed):
    p = slow_roofline()
    r = fit_program(p, refreshed, refreshed.names(), "global", seed=5, max_evals=400)
    assert r.init_loss > 1.0  # 40 ms of overhead per step is far too slow
    assert r.loss < 0.5 * r.init_loss
    lo, hi = p.bounds()
    vals = np.array([r.groups["global"][n] for n in p.const_names])
    assert np.all(vals >= lo) and np.all(vals <= hi)


@pytest.mark.parametrize("scope", ["per_model", "per_scenario"])
def test_scopes_fit_one_vector_per_group(refreshed, scope):
    p = seed_program("linear")
    names = refreshed.names()
    r = fit_program(p, refreshed, names, scope, seed=3, max_evals=120, restarts=0)
    expected = {group_key(refreshed.by_name[n], scope) for n in names}
    assert set(r.groups) == expected and len(expected) == 4
    cmap = const_map(p, r.groups, refreshed.scenarios, scope)
    for sc in refreshed.scenarios:
        g = r.groups[group_key(sc, scope)]
        assert cmap[sc.name].tolist() == [g[k] for k in p.const_names]
    assert r.loss == pytest.approx(loss(refreshed.score(step_model(p), cmap, names), names))
    assert r.loss < r.init_loss


def test_program_that_is_always_invalid_reports_status(refreshed):
    p = parse_program(ALWAYS_INVALID)
    r = fit_program(p, refreshed, refreshed.names(), "global", seed=1, max_evals=60,
                    restarts=1)
    assert r.status == "invalid" and r.loss == float("inf")
    assert r.group_loss == {"global": float("inf")}  # the penalty never leaks out


def test_program_without_constants(refreshed):
    p = parse_program("CONSTANTS = {}\ndef step_time(f, c):\n"
                      "    return 1.2 * (f.weight_read + f.kv_read) + 2000.0\n")
    r = fit_program(p, refreshed, refreshed.names(), "global", seed=1)
    assert r.status == "no_constants" and r.groups == {"global": {}}
    assert np.isfinite(r.loss) and r.loss == r.init_loss


def test_fit_needs_names_and_corpora(refreshed, small_scenarios):
    from evaluator.api import Evaluator

    p = seed_program("linear")
    with pytest.raises(ValueError, match="at least one"):
        fit_program(p, refreshed, [], "global", seed=1)
    with pytest.raises(ValueError, match="refresh_corpora"):
        fit_program(p, Evaluator(small_scenarios), [small_scenarios[0].name], "global", 1)


def test_prior_holds_constants_near_their_declared_values(refreshed):
    """``prior_strength``: the declared constants are a prior; the fit trades loss for it."""
    p = seed_program("trained_physics")
    names = refreshed.names()
    box_dist = []
    fits = []
    for strength in (0.0, 3.0, 30.0):  # 0.3 is within CMA-ES's noise of 0 on some corpora
        r = fit_program(p, refreshed, names, "global", seed=11, max_evals=250,
                        prior_strength=strength)
        x = np.array([r.groups["global"][n] for n in p.const_names])
        box = Box(p)
        box_dist.append(float(((box.to_unit(x) - box.to_unit(p.init_vector())) ** 2).sum()))
        fits.append(r)
    assert box_dist[0] > box_dist[1] > box_dist[2]  # stronger prior, closer to the seed
    assert box_dist[2] < 0.02
    assert fits[0].loss <= fits[2].loss  # unpenalised fit reaches the lowest training loss
    again = fit_program(p, refreshed, names, "global", seed=11, max_evals=250,
                        prior_strength=3.0)
    assert again.groups == fits[1].groups


def test_request_pairs_are_every_distinct_pair_computed_once(refreshed):
    from evolve.fitting.teacher_forced import request_pairs

    scs = [refreshed.by_name[n] for n in refreshed.names()[:2]]
    q = request_pairs(refreshed, scs)
    from evaluator.api import REQUEST_FIELD_NAMES, request_inputs

    want = {tuple(col) for sc in scs
            for col in request_inputs(sc.input_tokens, sc.output_tokens, sc.arch_vector).T}
    assert q.shape == (len(REQUEST_FIELD_NAMES), len(want)) and q.dtype == np.float64
    assert {tuple(col) for col in q.T} == want  # each request with its server's rows
    assert {(int(a), int(b)) for a, b in q[:2].T} == {
        (a, b) for sc in scs for a, b in zip(sc.input_tokens.tolist(),
                                             sc.output_tokens.tolist(), strict=True)}
    assert np.all(np.diff(q[0]) >= 0)  # rows sorted, as np.unique gives them
    assert request_pairs(refreshed, scs) is q  # cached: a fit of every start reuses it
    assert not q.flags.writeable  # shared by every fit: nobody may change it
    assert request_pairs(refreshed, scs[:1]) is not q  # keyed by the group's runs
