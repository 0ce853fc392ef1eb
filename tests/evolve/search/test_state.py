"""Loop state (evolve.search.state): the rows it writes, the rules it keeps, and the resume
contract: the state rebuilt from the archive after a generation equals, field by field, the
state the uninterrupted loop carried (here on a three-generation run of hand-made programs
through the real steps, with fits and simulations scripted)."""

from __future__ import annotations

import hashlib
import math

import pytest
from search_fakes import (
    EXPRS,
    TRAIN,
    VALIDATE,
    FakeRefresh,
    ScriptedPool,
    books,
    config,
    context,
    probe,
    program,
    scored,
)

from evolve.archive import Archive
from evolve.archive.ids import source_id as archive_source_id
from evolve.archive.models import CorpusVersion
from evolve.errors import ArchiveError
from evolve.operators.base import Proposal
from evolve.program.language import parse_program
from evolve.search import refresh as refresh_mod
from evolve.search import seeding
from evolve.search.children import evaluate_children
from evolve.search.grid import Elite, Grid
from evolve.search.pareto import Frontier
from evolve.search.refresh import maybe_refresh
from evolve.search.seeding import generation_zero
from evolve.search.state import (
    KEPT_REJECTIONS,
    LoopState,
    evaluation_row,
    llm_row,
    load_state,
    registers_fingerprint,
    snapshot_rows,
    source_id,
)

SPLITS = {TRAIN: "train", VALIDATE: "validate"}


# ---- small rules ---------------------------------------------------------------------------

def test_source_id_is_the_archives_hash_of_the_text():
    text = "def step_time(f, c):\n    return \udc80\n"  # a lone surrogate from a bad reply
    assert source_id(text) == archive_source_id(text)
    assert source_id("x") == hashlib.sha256(b"x").hexdigest()


def test_rejections_keep_the_last_few_per_parent_in_order():
    st = LoopState(grid=Grid())
    for i in range(KEPT_REJECTIONS + 3):
        st.note_rejection("p", f"r{i}")
    st.note_rejection("q", "only")
    assert st.rejections["p"] == [f"r{i}" for i in range(3, KEPT_REJECTIONS + 3)]
    assert st.rejections["q"] == ["only"]


def test_sequences_count_per_kind_and_generation():
    st = LoopState(grid=Grid())
    assert [st.next_seq(1), st.next_seq(1), st.next_seq(1, "program"), st.next_seq(2),
            st.next_seq(1)] == [0, 1, 0, 0, 2]


def test_remember_stores_no_groups_as_empty():
    st = LoopState(grid=Grid())
    p = program(EXPRS[1])
    res = scored(0.3, val=0.4)
    res.groups = None
    st.remember(p, res)
    info = st.info[p.id]
    assert (info.program, info.groups, info.loss, info.val_loss) == (p, {}, 0.3, res.val_loss)


@pytest.mark.parametrize(("generation", "complexity", "cap", "claims"), [
    (0, 40, 30, True),      # seeds always claim
    (3, 30, 30, True),
    (3, 31, 30, False),
    (0, None, 30, False),   # an unparsed source has nothing to claim
    (3, None, 30, False)])
def test_which_programs_claim_their_fingerprint(generation, complexity, cap, claims):
    assert registers_fingerprint(generation, complexity, cap) is claims


def test_llm_rows_one_per_distinct_call_counted_against_the_budgets():
    st = LoopState(grid=Grid())
    shared = {"prompt_tokens": 100, "completion_tokens": 20, "cost_usd": 0.5, "model": "m",
              "status": "ok", "reply": "r"}
    other = {"prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.1}
    props = [Proposal("a", "llm:m", (), llm_call=shared), Proposal("b", "llm:m", (),
                                                                   llm_call=shared),
             Proposal("c", "offline:m", ()), Proposal(None, "llm:m", (), llm_call=other),
             Proposal("d", "llm:m", (), llm_call=dict(other))]  # equal, but another call
    rows = st.llm_rows(3, 4, props)
    assert [(r.run_id, r.generation, r.seq) for r in rows] == [(3, 4, 0), (3, 4, 1), (3, 4, 2)]
    assert (rows[0].model, rows[0].reply, rows[0].prompt_tokens) == ("m", "r", 100)
    assert st.llm_tokens == 120 + 15 + 15
    assert st.llm_cost == pytest.approx(0.7)
    # a replayed (cached) call costs nothing now but counts at its recorded price
    st.llm_rows(3, 5, [Proposal("e", "llm:m", (), llm_call={
        "prompt_tokens": 1, "cost_usd": 0.0, "cached": True, "recorded_cost_usd": 2.0})])
    assert st.llm_cost == pytest.approx(2.7)


def test_llm_row_defaults_for_missing_fields():
    row = llm_row(1, 2, 3, {"cached": 1, "prompt_tokens": None, "reply": None})
    assert (row.request_hash, row.model, row.template_version, row.prompt_tokens,
            row.completion_tokens, row.cost_usd, row.latency_s, row.status, row.reply,
            row.error, row.cached) == ("", "", "", 0, 0, 0.0, 0.0, "", "", "", True)


def test_evaluation_rows_accepted_rejected_and_screened():
    ok = evaluation_row(1, 2, 3, "id", "child", "op", "cv", scored(0.2), complexity=4)
    assert (ok.status, ok.reason, ok.loss, ok.n_evals, ok.complexity, ok.corpus_version) == (
        "accepted", "", 0.2, 5, 4, "cv")
    assert ok.constants == {"global": {"a": 2.5, "b": 1.5}} and TRAIN in ok.metrics
    bad = evaluation_row(1, 2, 4, "id", "child", "op", "cv", scored(0.2, reason="physics: x"))
    assert (bad.status, bad.reason, bad.loss) == ("rejected", "physics: x", 0.2)
    inf = evaluation_row(1, 2, 5, "id", "child", "op", "cv", scored(math.inf))
    assert inf.status == "rejected"  # no reason, but no finite loss either
    empty = scored(0.2)
    empty.metrics = {}
    assert evaluation_row(1, 2, 6, "id", "child", "op", "cv", empty).metrics is None
    scr = evaluation_row(1, 2, 7, None, "screen", "op", "cv", reason="no source")
    assert (scr.status, scr.reason, scr.loss, scr.constants, scr.metrics, scr.n_evals,
            scr.program_id) == ("rejected", "no source", None, None, None, 0, None)


def test_snapshot_rows_store_the_grid_and_the_hall_with_the_pick():
    grid = Grid()
    elites = [Elite("a" * 64, 0.30, 2, 1, 0, 0.9), Elite("b" * 64, 0.31, 5, 2, 1, 0.2),
              Elite("c" * 64, 0.50, 8, 0, 2, 0.1)]
    for e in elites:
        grid.try_insert(e)
    front = Frontier.from_elites(grid.elites(), 1.2)
    rows = snapshot_rows(9, 4, grid, front)
    cells = [r for r in rows if type(r).__name__ == "GridCell"]
    hall = [r for r in rows if type(r).__name__ == "FrontierRow"]
    assert [(r.cell, r.program_id, r.elite_generation) for r in cells] == [
        (f"{c[0]},{c[1]}", e.program_id, e.generation) for c, e in grid.cells()]
    assert [(r.position, r.program_id) for r in hall] == list(enumerate(
        e.program_id for e in front.hall))
    # the pick reads the validate loss among the eligible (within 1.2 x the best)
    assert [r.program_id for r in hall if r.picked] == ["b" * 64]
    assert {(r.run_id, r.generation) for r in rows} == {(9, 4)}


# ---- the resume contract --------------------------------------------------------------------

def _nan(x):
    return "nan" if isinstance(x, float) and math.isnan(x) else x


def _summary(st):
    """Every field a resumed run starts from, comparable (nan made equal to itself)."""
    return {
        "cells": [(c, e, _nan(e.val_loss)) for c, e in st.grid.cells()],
        # what parents and refreshes read: the elites' fits (the running loop also keeps
        # the fits of programs that lost their cell, which nothing reads again)
        "info": {e.program_id: (v.program.id, v.groups, v.metrics, v.loss, _nan(v.val_loss))
                 for e in st.grid.elites() for v in [st.info[e.program_id]]},
        "seen": st.seen_ids,
        "fingerprints": st.fingerprints,
        # an unparsed source has no print either way (the state records None for it on
        # resume, nothing while running: both read as None)
        "fp_of": {k: v for k, v in st.fp_of.items() if v is not None},
        "corpus": [(r.seq, r.version, r.generation, r.program_id, r.scope, r.constants,
                    r.closed_loop_loss, r.adopted, r.champion_loss) for r in st.corpus_rows],
        "ref_loss": st.ref_loss, "n_refreshes": st.n_refreshes,
        "last_refresh_gen": st.last_refresh_gen, "n_fitted": st.n_fitted,
        "llm_tokens": st.llm_tokens, "llm_cost": pytest.approx(st.llm_cost),
        "generations_done": st.generations_done, "rejections": st.rejections,
    }


LOSS = {EXPRS[0]: 0.40, EXPRS[1]: 0.30, EXPRS[3]: 0.35,
        "c.b * f.decode_tokens + c.a": 0.05,       # generation 1's champion
        "c.a * f.decode_tokens": 0.45}


UNPHYSICAL = "c.a * f.prefill_tokens * f.decode_tokens"


def _fit(prog, seed):
    for e, loss in LOSS.items():
        if program(e).id == prog.id:
            return scored(loss, val=loss + 0.1)
    if prog.id == program(UNPHYSICAL).id:
        return scored(0.7, reason="physics: step time grows by 0.0 us per token")
    return scored(0.6 + (seed % 7) / 100, val=0.8)  # repairs and the rest


def _rescore(fn, source, groups):
    res = _fit(parse_program(source), 0)
    return scored(res.loss * 1.5, val=res.loss, groups=groups)


def _commit(archive, b, run_id, g, rows):
    rows = list(rows) + snapshot_rows(run_id, g, b.state.grid, b.frontier())
    archive.commit_generation(run_id, g, rows)
    b.state.generations_done = g


def _llm(tokens, cost):
    return {"prompt_tokens": tokens, "completion_tokens": 3, "cost_usd": cost, "model": "m",
            "status": "ok", "cached": False}


def test_resume_rebuilds_the_state_the_loop_carried(tmp_path, monkeypatch):
    monkeypatch.setattr(seeding, "build_probe", lambda ev, names: probe())
    monkeypatch.setattr(refresh_mod, "refresh", FakeRefresh(
        [("v1", 1.0), ("v2", 0.5), ("v3", 0.3)]))
    cfg = config(complexity_cap=4, refresh_min_gap=1, refresh_margin=0.1, bootstrap_seed="")
    cfg.fit.seed_polish_evals = 0
    cfg.operator.kind, cfg.operator.repairs = "llm", 1
    archive = Archive(tmp_path / "a.db")
    run_id = archive.create_run(cfg.run.seed, cfg.stored_dict(), SPLITS, None)
    b = books(cfg, run_id=run_id)
    ctx = context(b.evaluator)
    pool = ScriptedPool(_fit, _rescore)
    seeds = [("s0", program(EXPRS[0])), ("s1", program(EXPRS[1])), ("s3", program(EXPRS[3]))]
    checkpoints = []

    _commit(archive, b, run_id, 0, generation_zero(b, ctx, cfg, pool, seeds, print))
    checkpoints.append(_summary(b.state))

    s1 = seeds[1][1].id
    call = _llm(100, 0.25)
    props = [Proposal(program("c.b * f.decode_tokens + c.a").source, "llm:mutate", (s1,),
                      llm_call=call),
             Proposal(program("c.b + c.a * f.prefill_tokens").source, "llm:mutate", (s1,),
                      llm_call=call),  # a twin of seed s1; the same call's second program
             Proposal("def step_time(f, c):\n    return (\n", "llm:mutate", (s1,),
                      llm_call=_llm(50, 0.1)),
             Proposal(program(UNPHYSICAL).source, "llm:mutate", (s1,),
                      llm_call=_llm(60, 0.2)),  # rejected by physics: repaired
             Proposal(None, "llm:mutate", (s1,), error="no program in the reply")]
    rows = b.llm_rows(1, props) + evaluate_children(b, pool, cfg, 1, props, ctx.probe)
    rows += maybe_refresh(b, ctx, cfg, pool, 1, print)
    # the generation has what a resume must rebuild: a twin, a repair, a kept rejection, a
    # refresh adopted
    reasons = [r.reason for r in rows if type(r).__name__ == "Evaluation" and r.kind == "screen"]
    assert any(x.startswith("same predictions") for x in reasons)
    assert any(x.startswith("does not parse") for x in reasons)
    assert any(getattr(r, "operator", "").startswith("repair:") for r in rows)
    assert b.state.rejections == {s1: ["physics: step time grows by 0.0 us per token"]}
    assert b.state.n_refreshes == 1 and b.state.corpus_rows[-1].adopted
    _commit(archive, b, run_id, 1, rows)
    checkpoints.append(_summary(b.state))

    props = [Proposal(program(EXPRS[4]).source, "offline:grow", (s1,)),  # over the cap
             Proposal(program("c.a * f.decode_tokens").source, "offline:drop", (s1,)),
             Proposal(program(EXPRS[0]).source, "offline:same", (s1,))]  # a known id
    _commit(archive, b, run_id, 2, evaluate_children(b, pool, cfg, 2, props, ctx.probe))
    checkpoints.append(_summary(b.state))

    loaded = load_state(archive, run_id, b.new_grid(), cfg, parse_program)
    assert _summary(loaded) == checkpoints[-1]
    assert loaded.rejections and loaded.fingerprints and loaded.n_refreshes == 1
    for pid, prog in loaded.programs.items():  # parsed on demand: elites and producers
        assert b.state.programs[pid] == prog and prog.source == b.state.programs[pid].source
    # the state after generation 1 is not that of generation 2: the comparison can fail
    assert checkpoints[1] != checkpoints[2]


def _one_generation(tmp_path, *, corpus=True, loss_in_grid=None, corpus_program=None,
                    llm_calls=(), prices=None):
    """A committed generation 0, hand-made: one seed, its fit, its grid cell, its corpus."""
    cfg = config()
    if prices:
        cfg.llm.model, cfg.llm.prices = "m", prices
    archive = Archive(tmp_path / "a.db")
    run_id = archive.create_run(cfg.run.seed, cfg.stored_dict(), SPLITS, None)
    b = books(cfg, run_id=run_id)
    p = program(EXPRS[1])
    rows = [b.program_row(p, p.source, (), "seed:s", 0)]
    b.register(p, 0)
    res = scored(0.3, val=0.4)
    rows.append(b.eval_row(0, p, "seed", "seed:s", res))
    b.accept(p, res, 0)
    rows += b.llm_rows(0, [Proposal(p.source, "llm:m", (), llm_call=c) for c in llm_calls])
    if corpus:
        row = CorpusVersion(run_id=run_id, seq=0, version="v1", generation=0,
                            program_id=corpus_program or p.id, scope="global",
                            constants={"global": {"a": 1.0}}, names=[TRAIN, VALIDATE],
                            window_steps=10, closed_loop_loss=1.0, adopted=True,
                            champion_loss=0.3)
        b.state.corpus_rows.append(row)
        b.state.ref_loss = 0.3
        rows.append(row)
    rows += snapshot_rows(run_id, 0, b.state.grid, b.frontier())
    if loss_in_grid is not None:
        for r in rows:
            if type(r).__name__ == "GridCell":
                r.loss = loss_in_grid
    archive.commit_generation(run_id, 0, rows)
    b.state.generations_done = 0
    return archive, run_id, b


def test_resume_of_a_hand_made_generation(tmp_path):
    archive, run_id, b = _one_generation(tmp_path)
    loaded = load_state(archive, run_id, b.new_grid(), b.cfg, parse_program)
    assert _summary(loaded) == _summary(b.state)


def test_resume_without_a_corpus_version_is_refused(tmp_path):
    archive, run_id, b = _one_generation(tmp_path, corpus=False)
    with pytest.raises(ArchiveError, match=f"run {run_id}: no corpus version recorded"):
        load_state(archive, run_id, b.new_grid(), b.cfg, parse_program)


def test_resume_refuses_a_grid_elite_without_its_evaluation(tmp_path):
    archive, run_id, b = _one_generation(tmp_path, loss_in_grid=0.25)
    with pytest.raises(ArchiveError, match="has no matching accepted evaluation"):
        load_state(archive, run_id, b.new_grid(), b.cfg, parse_program)


def test_resume_refuses_a_corpus_made_by_an_unknown_program(tmp_path):
    archive, run_id, b = _one_generation(tmp_path, corpus_program="ab" * 32)
    with pytest.raises(ArchiveError, match="program abababababab missing from the archive"):
        load_state(archive, run_id, b.new_grid(), b.cfg, parse_program)


def test_resume_counts_replayed_llm_calls_at_their_recorded_price(tmp_path):
    """A replayed (cached) call is stored at no cost but counted at its price while the run
    goes on; a resume prices it again from the run's prices (found: it once forgot it, so
    an interrupted run could pass llm.max_cost_usd)."""
    cached = {"prompt_tokens": 100, "completion_tokens": 20, "cost_usd": 0.0, "cached": True,
              "recorded_cost_usd": 0.5, "status": "ok"}  # 100 * 1000 + 20 * 20000, per 1M
    archive, run_id, b = _one_generation(tmp_path, llm_calls=[cached],
                                         prices={"m": (1000.0, 20000.0)})
    assert b.state.llm_cost == 0.5  # what the uninterrupted run carries
    loaded = load_state(archive, run_id, b.new_grid(), b.cfg, parse_program)
    assert loaded.llm_tokens == b.state.llm_tokens
    assert loaded.llm_cost == pytest.approx(b.state.llm_cost)

