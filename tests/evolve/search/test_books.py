"""Books (evolve.search.books): the rows of a run and the loop state they must agree with:
sequence numbers per generation, fingerprint claims by the state's rule, only valid fits
compete for the grid, every row carries the corpus version it was judged on."""

from __future__ import annotations

import math

import pytest
from search_fakes import EXPRS, books, config, program, scored

from evolve.search.grid import Elite


def test_program_rows_number_per_generation_apart_from_evaluation_rows():
    b = books()
    p, q = program(EXPRS[0]), program(EXPRS[1])
    r0 = b.program_row(p, p.source, (), "seed:x", 0, fp="fp-p")
    b.eval_row(0, p, "seed", "seed:x", scored(0.5))  # eval seq 0 of gen 0
    r1 = b.program_row(q, q.source, (p.id,), "offline:m", 0)
    r2 = b.program_row(None, "def broken(:", (q.id,), "llm:m", 1, pid="ab" * 32)
    assert (r0.seq, r1.seq, r2.seq) == (0, 1, 0)
    assert (r0.id, r0.complexity, r0.n_features, r0.fingerprint) == (
        p.id, p.complexity, len(p.features), "fp-p")
    assert r1.parent_ids == [p.id] and r1.operator == "offline:m" and r1.fingerprint is None
    # an unparsed source: its text's id, no complexity, and no fingerprint entry in the state
    assert (r2.id, r2.complexity, r2.n_features, r2.generation) == ("ab" * 32, None, None, 1)
    assert b.state.fp_of == {p.id: "fp-p", q.id: None}


def test_register_claims_a_fingerprint_once_and_only_by_the_rule():
    cfg = config(complexity_cap=3)
    b = books(cfg)
    small, twin, big = program(EXPRS[1]), program(EXPRS[2]), program(EXPRS[4])
    assert small.complexity <= 3 < big.complexity
    for prog in (small, twin, big):
        b.program_row(prog, prog.source, (), "op", 1, fp="same")
    b.register(big, 1)  # over the cap after generation 0: seen, claims nothing
    assert b.state.fingerprints == {} and big.id in b.state.seen_ids
    b.register(small, 1)
    b.register(twin, 1)  # a later twin does not take the print over
    assert b.state.fingerprints == {"same": small.id}
    assert set(b.state.programs) == {small.id, twin.id, big.id}
    b2 = books(cfg)
    b2.program_row(big, big.source, (), "seed:big", 0, fp="fp-big")
    b2.register(big, 0)  # seeds always claim theirs
    assert b2.state.fingerprints == {"fp-big": big.id}


def test_accept_inserts_valid_fits_only():
    b = books()
    p, q = program(EXPRS[1]), program(EXPRS[3])
    b.accept(p, scored(0.4, reason="physics: too fast"), 2)
    b.accept(q, scored(math.inf), 2)
    assert len(b.state.grid) == 0 and b.state.info == {}
    b.accept(q, scored(0.3, val=0.6), 2)
    (elite,) = b.state.grid.elites()
    assert elite == Elite(q.id, 0.3, q.complexity, len(q.features), 2)
    assert elite.val_loss == b.state.info[q.id].val_loss == pytest.approx(0.6)
    assert b.state.info[q.id].groups == {"global": {"a": 2.5, "b": 1.5}}
    b.accept(q, scored(0.2), 3)  # a better fit of the same program replaces it in its cell
    assert [(e.loss, e.generation) for e in b.state.grid.elites()] == [(0.2, 3)]


def test_evaluation_and_rejection_rows_share_a_sequence_and_carry_the_corpus_version():
    b = books(version="cv-1")
    p = program(EXPRS[1])
    ok = b.eval_row(4, p, "child", "offline:m", scored(0.25))
    b.evaluator.corpus_version = "cv-2"
    rej = b.rejection_row(4, p.id, "screen", "offline:m", "evaluation budget exhausted")
    bad = b.eval_row(4, p, "child", "offline:m", scored(0.25, reason="fit failed: x"))
    assert [r.seq for r in (ok, rej, bad)] == [0, 1, 2]
    assert (ok.status, ok.corpus_version, ok.loss, ok.complexity) == (
        "accepted", "cv-1", 0.25, p.complexity)
    assert (rej.status, rej.reason, rej.corpus_version, rej.n_evals, rej.loss) == (
        "rejected", "evaluation budget exhausted", "cv-2", 0, None)
    assert (bad.status, bad.reason) == ("rejected", "fit failed: x")
    assert b.eval_row(5, p, "child", "op", scored(0.1)).seq == 0  # a new generation


def test_champion_and_frontier_use_the_configured_tolerance():
    p, q = program(EXPRS[1]), program(EXPRS[3])
    for tol, expected in ((1.0, p), (2.0, q)):
        b = books(config(pick_tolerance=tol))
        b.accept(p, scored(0.10, val=0.9), 1)  # best training loss, poor on validate
        b.accept(q, scored(0.15, val=0.2), 1)
        assert b.champion().program_id == expected.id
        assert b.frontier().pick().program_id == expected.id
    assert books().champion() is None
