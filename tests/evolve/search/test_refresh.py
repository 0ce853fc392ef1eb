"""Corpus refresh (evolve.search.refresh): when the champion earns a refresh, when its
corpora are kept (the closed-loop gate), that rejected corpora are put back, and that kept
ones re-score every elite so the grid compares like with like. The simulation itself is
replaced by a script (search_fakes.FakeRefresh): these tests are about the rule."""

from __future__ import annotations

import pytest
from search_fakes import EXPRS, FakeRefresh, ScriptedPool, books, config, context, program, scored

from evolve.archive.models import CorpusVersion
from evolve.errors import ArchiveError, UserError
from evolve.search import refresh as refresh_mod
from evolve.search.refresh import maybe_refresh, new_corpus, rebuild_corpus, rescore

GROUPS = {"global": {"a": 1.0, "b": 2.0}}


@pytest.fixture()
def fake(monkeypatch):
    def install(*script):
        f = FakeRefresh(list(script))
        monkeypatch.setattr(refresh_mod, "refresh", f)
        return f
    return install


def test_first_corpus_is_strict_and_always_adopted(fake):
    f = fake(("v1", 9.0))
    b = books(config(refresh_gate=True))
    ctx = context(b.evaluator)
    seed = program(EXPRS[0])
    row = new_corpus(b, ctx, b.cfg, 0, seed, GROUPS, "global")
    assert f.calls == [(seed.id, GROUPS, "global", True)]  # nothing to fall back on
    assert (row.seq, row.version, row.adopted, row.closed_loop_loss, row.champion_loss) == (
        0, "v1", True, 9.0, None)
    assert (row.program_id, row.scope, row.names) == (seed.id, "global", ctx.names)
    assert b.state.corpus_rows == [row] and b.state.programs[seed.id] is seed
    assert b.evaluator.corpus_version == "v1"


def test_first_corpus_that_cannot_simulate_names_the_bootstrap_seed(fake):
    fake(ValueError("run_train: stuck pool"))
    b = books()
    seed = program(EXPRS[0])
    with pytest.raises(UserError, match=f"seed {seed.id[:12]} cannot simulate.*stuck pool.*"
                                        "bootstrap_seed"):
        new_corpus(b, context(b.evaluator), b.cfg, 0, seed, GROUPS, "global")
    assert b.state.corpus_rows == []


@pytest.mark.parametrize(("closed", "gate", "adopted"), [
    (0.5, True, True), (1.0, True, False), (2.0, True, False), (2.0, False, True)])
def test_gate_keeps_new_corpora_only_if_better_closed_loop(fake, closed, gate, adopted):
    fake(("v1", 1.0), ("v2", closed))
    b = books(config(refresh_gate=gate))
    ctx = context(b.evaluator)
    new_corpus(b, ctx, b.cfg, 0, program(EXPRS[0]), GROUPS, "global")
    before = (dict(b.evaluator.corpora), dict(b.evaluator.fit_sets))
    row = new_corpus(b, ctx, b.cfg, 3, program(EXPRS[1]), GROUPS, "pooled")
    assert (row.seq, row.generation, row.adopted) == (1, 3, adopted)
    if adopted:
        assert b.evaluator.corpus_version == "v2"
    else:  # the old corpora are back, as they were
        assert b.evaluator.corpus_version == "v1"
        assert (b.evaluator.corpora, b.evaluator.fit_sets) == before


def test_gate_compares_with_the_last_adopted_corpus(fake):
    fake(("v1", 1.0), ("v2", 0.8), ("v3", 0.9), ("v4", 0.85), ("v5", 0.7))
    b = books(config(refresh_gate=True))
    ctx = context(b.evaluator)
    for g, expr in enumerate(EXPRS):
        new_corpus(b, ctx, b.cfg, g, program(expr), GROUPS, "pooled")
    # 0.9 loses to 0.8; 0.85 loses to 0.8 (not to the rejected 0.9); 0.7 wins
    assert [r.adopted for r in b.state.corpus_rows] == [True, True, False, False, True]


def _state_for_refresh(b, losses=(0.30, 0.20)):
    progs = [program(EXPRS[1]), program(EXPRS[3])]
    for p, loss in zip(progs, losses, strict=True):
        b.accept(p, scored(loss), 0)
    b.state.ref_loss, b.state.last_refresh_gen = 0.5, 0
    return progs


@pytest.mark.parametrize(("change", "why"), [
    ({"max_refreshes": 0}, "refreshes used up"),
    ({"refresh_min_gap": 6}, "too soon after the last"),
    ({"refresh_margin": 0.7}, "not better than the last by the margin")])
def test_no_refresh_unless_the_champion_earned_it(fake, change, why):
    f = fake(("v9", 0.1))
    cfg = config(**{"refresh_min_gap": 5, "refresh_margin": 0.5, "max_refreshes": 2,
                    **change})  # without the change, generation 5 refreshes (tests below)
    b = books(cfg)
    _state_for_refresh(b)  # best 0.20 < 0.5 * (1 - 0.5) = 0.25
    pool = ScriptedPool(lambda p, s: scored(1.0))
    assert maybe_refresh(b, context(b.evaluator), cfg, pool, 5, print) == [], why
    assert f.calls == [] and b.state.n_refreshes == 0


def test_no_refresh_of_an_empty_grid(fake):
    f = fake()
    b = books()
    assert maybe_refresh(b, context(b.evaluator), b.cfg, ScriptedPool(None), 50, print) == []
    assert f.calls == []


def test_refresh_not_adopted_keeps_the_grid_and_moves_the_reference(fake):
    fake(("v0", 1.0), ("v9", 5.0))  # the champion is unstable closed loop
    cfg = config(refresh_min_gap=5, refresh_margin=0.5, refresh_gate=True)
    b = books(cfg)
    ctx = context(b.evaluator)
    new_corpus(b, ctx, cfg, 0, program(EXPRS[0]), GROUPS, "global")
    _state_for_refresh(b)
    grid = b.state.grid.cells()
    pool = ScriptedPool(lambda p, s: scored(1.0))
    logs = []
    rows = maybe_refresh(b, ctx, cfg, pool, 5, logs.append)
    assert [type(r) for r in rows] == [CorpusVersion] and not rows[0].adopted
    assert rows[0].champion_loss == b.state.ref_loss == 0.20
    assert (b.state.n_refreshes, b.state.last_refresh_gen) == (1, 5)
    assert b.state.grid.cells() == grid and pool.resets == 0 and pool.applies == []
    assert "kept (worse in closed loop)" in logs[0]


def test_adopted_refresh_rescores_every_elite_on_the_new_corpora(fake):
    f = fake(("v0", 1.0), ("v9", 0.15))
    cfg = config(refresh_min_gap=5, refresh_margin=0.5, refresh_gate=True)
    b = books(cfg)
    ctx = context(b.evaluator)
    new_corpus(b, ctx, cfg, 0, program(EXPRS[0]), GROUPS, "global")
    progs = _state_for_refresh(b)
    champ = progs[1]
    new_loss = {progs[0].id: 0.12, progs[1].id: 0.18}
    rescored = []

    def applied(fn, source, groups):
        assert fn is rescore
        p = next(p for p in progs if p.source == source)
        rescored.append((p.id, groups))
        return scored(new_loss[p.id], groups=groups)

    pool = ScriptedPool(lambda p, s: scored(1.0), applied)
    rows = maybe_refresh(b, ctx, cfg, pool, 6, print)
    assert f.calls[-1] == (champ.id, b.state.info[champ.id].groups, ctx.scope, False)
    assert rows[0].adopted and pool.resets == 1
    assert sorted(rescored) == sorted((p.id, {"global": {"a": 2.5, "b": 1.5}}) for p in progs)
    assert [(r.kind, r.corpus_version) for r in rows[1:]] == [("rescore", "v9")] * 2
    # the grid holds the re-scored losses, elites keep their generation
    assert {e.program_id: (e.loss, e.generation) for e in b.state.grid.elites()} == {
        progs[0].id: (0.12, 0), progs[1].id: (0.18, 0)}
    assert rows[0].champion_loss == b.state.ref_loss == 0.12
    assert (b.state.n_refreshes, b.state.last_refresh_gen) == (1, 6)


def test_rebuild_corpus_must_reproduce_the_stored_version(fake):
    fake(("v1", 1.0), ("v1", 1.0), ("changed", 1.0))
    b = books()
    ctx = context(b.evaluator)
    row = new_corpus(b, ctx, b.cfg, 0, program(EXPRS[0]), GROUPS, "global")
    rebuild_corpus(b, ctx, row)
    with pytest.raises(ArchiveError, match="rebuilt corpus version changed != stored v1"):
        rebuild_corpus(b, ctx, row)
