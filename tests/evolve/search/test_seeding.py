"""Generation 0 (evolve.search.seeding): the bootstrap seed at its initial constants makes
the first corpora, every seed is fitted with a seed from its position, the best seed
re-simulates them, and the seeds' second fits replace the first only when better (with the
comparison recorded). Simulation and fitting are scripted (search_fakes)."""

from __future__ import annotations

import pytest
from search_fakes import (
    EXPRS,
    FakeRefresh,
    ScriptedPool,
    books,
    config,
    context,
    probe,
    program,
    scored,
)

from evolve.errors import UserError
from evolve.fitting.closed_loop import SEED_SIGMA0
from evolve.search import refresh as refresh_mod
from evolve.search import seeding
from evolve.search.polish import refit_job
from evolve.search.refresh import rescore
from evolve.search.rng import child_seed
from evolve.search.seeding import generation_zero

SEEDS = [("plain", program(EXPRS[0])), ("prefill", program(EXPRS[1])),
         ("both", program(EXPRS[3]))]
FIRST = {SEEDS[0][1].id: 0.40, SEEDS[1][1].id: 0.30, SEEDS[2][1].id: 0.35}


@pytest.fixture()
def fake(monkeypatch):
    monkeypatch.setattr(seeding, "build_probe", lambda ev, names: probe())

    def install(*script):
        f = FakeRefresh(list(script))
        monkeypatch.setattr(refresh_mod, "refresh", f)
        return f
    return install


def _cfg(**search):
    cfg = config(**{"bootstrap_seed": "prefill", **search})
    cfg.fit.seed_polish_evals = 0
    return cfg


def _pool(second=None):
    """First round of fits: FIRST; second round (on the champion's corpora): ``second``."""
    def fit(prog, seed):
        first_round = seed in {child_seed(7, 0, i) for i in range(len(SEEDS))}
        table = FIRST if first_round else (second or {})
        return scored(table[prog.id]) if prog.id in table else scored(9.0, reason="fit failed")
    return ScriptedPool(fit)


def _run(cfg, pool, seeds=SEEDS, logs=None):
    b = books(cfg)
    ctx = context(b.evaluator)
    rows = generation_zero(b, ctx, cfg, pool, seeds, (logs if logs is not None else []).append)
    return b, ctx, rows


def test_bootstrap_seed_makes_the_first_corpora_at_its_initial_constants(fake):
    f = fake(("v1", 1.0), ("v2", 0.5))
    _run(_cfg(), _pool(FIRST))
    boot = SEEDS[1][1]
    assert f.calls[0] == (boot.id, {"global": {"a": 2.0, "b": 3.0}}, "global", True)


def test_an_unknown_bootstrap_seed_falls_back_to_the_first_and_says_so(fake):
    f = fake(("v1", 1.0), ("v2", 0.5))
    logs = []
    _run(_cfg(bootstrap_seed="nope"), _pool(FIRST), logs=logs)
    assert f.calls[0][0] == SEEDS[0][1].id
    assert any("'nope' is not among the seeds" in m and "the first, 'plain', stands in" in m
               for m in logs)


def test_seeds_are_fitted_by_position_and_the_best_remakes_the_corpora(fake):
    f = fake(("v1", 1.0), ("v2", 0.5))
    second = {SEEDS[0][1].id: 0.38, SEEDS[1][1].id: 0.33}  # better, worse; the third fails
    pool = _pool(second)
    b, ctx, rows = _run(_cfg(), pool)
    n = len(SEEDS)
    assert [s for _p, s in pool.maps[0]] == [child_seed(7, 0, i) for i in range(n)]
    assert [s for _p, s in pool.maps[1]] == [child_seed(7, 0, n + i) for i in range(n)]
    champ = SEEDS[1][1]  # lowest first-fit loss
    assert f.calls[1] == (champ.id, {"global": {"a": 2.5, "b": 1.5}}, ctx.scope, False)
    assert pool.resets == 1  # the workers drop the old corpora before the second round
    kinds = [(type(r).__name__, getattr(r, "kind", ""), getattr(r, "operator", "")) for r in rows]
    assert kinds == [("CorpusVersion", "", "")] + [
        ("ProgramRow", "", f"seed:{s}") for s, _ in SEEDS] + [
        ("Evaluation", "seed", f"seed:{s}") for s, _ in SEEDS] + [
        ("CorpusVersion", "", "")] + [
        ("Evaluation", "refit", "seed:plain"), ("Evaluation", "refit", "seed:prefill"),
        ("Evaluation", "refit", "seed:both")]
    refit = rows[-3:]
    assert (refit[0].status, refit[0].loss) == ("accepted", 0.38)
    assert (refit[1].status, refit[1].reason) == (
        "rejected", "refit no better than the first fit (0.3300 >= 0.3000)")
    assert refit[2].status == "rejected" and refit[2].reason.startswith("refit no better")
    # the grid keeps the better fit of each seed
    assert {e.program_id: e.loss for e in b.state.grid.elites()} == {
        SEEDS[0][1].id: 0.38, SEEDS[1][1].id: 0.30, SEEDS[2][1].id: 0.35}
    corpus = rows[1 + 2 * n]
    assert corpus.adopted and corpus.champion_loss == b.state.ref_loss == 0.30
    assert rows[0].champion_loss is None
    assert b.state.seen_ids == {p.id for _s, p in SEEDS}


def test_corpora_kept_by_the_gate_mean_no_second_fit(fake):
    fake(("v1", 1.0), ("v2", 1.5))  # the champion is worse closed loop than the bootstrap
    pool = _pool({p.id: 0.01 for _s, p in SEEDS})
    b, _ctx, rows = _run(_cfg(refresh_gate=True), pool)
    assert len(pool.maps) == 1 and pool.resets == 0
    assert not rows[-1].adopted and rows[-1].champion_loss == b.state.ref_loss == 0.30
    assert {e.program_id: e.loss for e in b.state.grid.elites()} == FIRST
    assert b.evaluator.corpus_version == "v1"


def test_no_seed_fitted_is_a_user_error_with_the_first_reason(fake):
    fake(("v1", 1.0))
    pool = ScriptedPool(lambda p, s: scored(9.0, reason="fit failed: all nan"))
    with pytest.raises(UserError, match="no seed program could be fitted: fit failed: all nan"):
        _run(_cfg(), pool)


def test_duplicate_seeds_are_fitted_once(fake):
    fake(("v1", 1.0), ("v2", 0.5))
    pool = _pool(FIRST)
    _b, _ctx, rows = _run(_cfg(), pool, seeds=[*SEEDS, ("again", SEEDS[1][1])])
    assert [p.id for p, _s in pool.maps[0]] == [p.id for _s, p in SEEDS]
    assert sum(type(r).__name__ == "ProgramRow" for r in rows) == len(SEEDS)


def test_seed_fingerprints_are_recorded_and_claimed(fake):
    fake(("v1", 1.0), ("v2", 0.5))
    b, _ctx, rows = _run(_cfg(dedup_fingerprint=True), _pool(FIRST))
    prints = {r.id: r.fingerprint for r in rows if type(r).__name__ == "ProgramRow"}
    assert all(prints.values()) and len(set(prints.values())) == len(SEEDS)
    assert b.state.fingerprints == {fp: pid for pid, fp in prints.items()}
    fake(("v1", 1.0), ("v2", 0.5))
    b, _ctx, rows = _run(_cfg(dedup_fingerprint=False), _pool(FIRST))
    assert b.state.fingerprints == {}
    assert {r.fingerprint for r in rows if type(r).__name__ == "ProgramRow"} == {None}


def test_seed_polish_refits_replace_the_first_fits(fake):
    fake(("v1", 1.0), ("v2", 0.5))
    cfg = _cfg()
    cfg.fit.seed_polish_evals = 7
    polished = {p.id: FIRST[p.id] - 0.1 for _s, p in SEEDS}

    def applied(fn, cfg_, source, res, evals, seed, gen, sigma):
        assert fn is refit_job
        pid = next(p.id for _s, p in SEEDS if p.source == source)
        assert res.loss == FIRST[pid]
        return True, scored(polished[pid])

    pool = _pool({})
    pool.applied = applied
    b, _ctx, rows = _run(cfg, pool)
    _fn, jobs = pool.applies[0]
    assert [(j[3], j[4], j[5], j[6]) for j in jobs] == [
        (7, 20_000 + i, 0, SEED_SIGMA0) for i in range(len(SEEDS))]
    seeds = [r for r in rows if getattr(r, "kind", "") == "seed"]
    assert [r.loss for r in seeds] == [polished[p.id] for _s, p in SEEDS]
    assert {e.program_id: e.loss for e in b.state.grid.elites()} == polished


def test_teacher_forced_first_fits_are_rescored_on_the_new_corpora(fake):
    fake(("v1", 1.0), ("v2", 0.5))
    cfg = _cfg()
    cfg.fit.fitness = "teacher_forced"
    again = {SEEDS[0][1].id: 0.50, SEEDS[1][1].id: 0.20, SEEDS[2][1].id: 0.60}

    def applied(fn, source, groups):
        assert fn is rescore
        return scored(again[next(p.id for _s, p in SEEDS if p.source == source)])

    pool = _pool({p.id: 0.45 for _s, p in SEEDS})
    pool.applied = applied
    b, _ctx, rows = _run(cfg, pool)
    rescores = [r for r in rows if getattr(r, "kind", "") == "rescore"]
    assert [(r.program_id, r.loss, r.corpus_version) for r in rescores] == [
        (p.id, again[p.id], "v2") for _s, p in SEEDS]
    # compared with the rescored first fit: 0.45 beats 0.50 and 0.60, not 0.20
    assert {e.program_id: e.loss for e in b.state.grid.elites()} == {
        SEEDS[0][1].id: 0.45, SEEDS[1][1].id: 0.20, SEEDS[2][1].id: 0.45}
