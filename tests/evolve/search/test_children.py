"""Children (evolve.search.children): cheap rejections first, twins by fingerprint, the
evaluation budget, fits seeded by proposal position, and exactly one evaluation row per
proposal, in proposal order, each rejection with its reason."""

from __future__ import annotations

from search_fakes import EXPRS, ScriptedPool, books, config, probe, program, scored

from evolve.operators.base import Proposal
from evolve.search.children import evaluate_children, screen
from evolve.search.rng import child_seed
from evolve.search.state import source_id

BROKEN = "def step_time(f, c):\n    return (\n"


def _evals(rows):
    return [r for r in rows if type(r).__name__ == "Evaluation"]


def _programs(rows):
    return [r for r in rows if type(r).__name__ == "ProgramRow"]


def test_screen_rejects_what_needs_no_computation():
    cfg = config(complexity_cap=3)
    b = books(cfg)
    prog, pid, reason, rows = screen(b, cfg, 1, Proposal(None, "llm:m", ("p",), error="timeout"))
    assert (prog, pid, reason, rows) == (None, None, "timeout", [])
    assert screen(b, cfg, 1, Proposal(None, "llm:m", ()))[2] == "operator returned no source"
    # a source that does not parse: recorded once under its text's id
    prog, pid, reason, rows = screen(b, cfg, 1, Proposal(BROKEN, "llm:m", ("p",)))
    assert prog is None and pid == source_id(BROKEN) and reason.startswith("does not parse: ")
    assert [(r.id, r.complexity, r.parent_ids) for r in rows] == [(pid, None, ["p"])]
    assert screen(b, cfg, 1, Proposal(BROKEN, "llm:m", ("q",)))[3] == []  # seen: no new row
    # over the cap: a row, no fit
    big = program(EXPRS[4])
    prog, pid, reason, rows = screen(b, cfg, 1, Proposal(big.source, "offline:m", ()))
    assert (prog, pid, reason) == (None, big.id, f"complexity {big.complexity} > cap 3")
    assert [r.id for r in rows] == [big.id]
    # a good program passes (no row yet: it is fingerprinted first); a second time it is known
    ok = program(EXPRS[1])
    assert screen(b, cfg, 1, Proposal(ok.source, "offline:m", ())) == (ok, ok.id, "", [])
    prog, pid, reason, rows = screen(b, cfg, 1, Proposal(ok.source, "offline:m", ()))
    assert (prog, reason, rows) == (None, f"duplicate of program {ok.id[:12]}", [])


def test_one_row_per_proposal_in_order_with_reasons_and_position_seeds():
    cfg = config(complexity_cap=3)
    cfg.run.max_evaluations = 3
    b = books(cfg)
    b.state.n_fitted = 1  # one child fitted in an earlier generation
    plain = program(EXPRS[1])  # c.a * f.prefill_tokens + c.b
    rewrite = program("c.b + c.a * f.prefill_tokens")  # the same function, another id
    assert plain.id != rewrite.id
    fits = {plain.id: scored(0.3), program(EXPRS[2]).id: scored(0.4, reason="physics: slow")}
    pool = ScriptedPool(lambda p, s: fits[p.id])
    props = [Proposal(plain.source, "offline:a", ("P1",)),
             Proposal(None, "offline:b", ("P2",), error="no edit applies"),
             Proposal(rewrite.source, "offline:c", ("P3",)),
             Proposal(program(EXPRS[2]).source, "offline:d", ("P4",)),
             Proposal(program(EXPRS[4]).source, "offline:e", ("P5",)),
             Proposal(program(EXPRS[0]).source, "offline:f", ("P6",))]
    rows = evaluate_children(b, pool, cfg, 3, props, probe())
    evals = _evals(rows)
    assert [e.operator for e in evals] == [p.operator for p in props]
    assert [e.seq for e in evals] == list(range(6))
    assert [(e.kind, e.status) for e in evals] == [
        ("child", "accepted"), ("screen", "rejected"), ("screen", "rejected"),
        ("child", "rejected"), ("screen", "rejected"), ("screen", "rejected")]
    reasons = [e.reason for e in evals]
    assert reasons[1] == "no edit applies"
    assert reasons[2] == f"same predictions as program {plain.id[:12]}"
    assert reasons[3] == "physics: slow"
    assert reasons[4].startswith("complexity ")
    assert reasons[5] == "evaluation budget exhausted"
    # fitted: the first and the fourth proposal, seeded by their positions
    assert pool.maps == [[(plain, child_seed(7, 3, 0)), (program(EXPRS[2]), child_seed(7, 3, 3))]]
    assert b.state.n_fitted == 3
    assert [e.program_id for e in b.state.grid.elites()] == [plain.id]
    # a fitted child's rejection is kept for its first parent's prompts; screens are not
    assert b.state.rejections == {"P4": ["physics: slow"]}
    # programs: every distinct parsed source once, the over-cap one without a fingerprint
    progs = {r.id: r for r in _programs(rows)}
    assert set(progs) == {plain.id, rewrite.id, program(EXPRS[2]).id, program(EXPRS[4]).id,
                          program(EXPRS[0]).id}
    assert progs[plain.id].fingerprint == progs[rewrite.id].fingerprint is not None
    assert progs[program(EXPRS[4]).id].fingerprint is None


def test_fit_seeds_and_rows_do_not_depend_on_earlier_rejections_being_fitted():
    """The archive must not depend on the pool: results come back in job order, rows are
    written in proposal order whatever the fits return."""
    cfg = config()
    p, q = program(EXPRS[1]), program(EXPRS[2])
    props = [Proposal(q.source, "offline:a", ()), Proposal(p.source, "offline:b", ())]
    outs = []
    for _ in range(2):
        b = books(cfg)
        pool = ScriptedPool(lambda prog, s: scored(0.1 if prog.id == p.id else 0.2))
        outs.append([(r.seq, r.program_id, r.loss) for r in _evals(
            evaluate_children(b, pool, cfg, 2, props, None))])
    assert outs[0] == outs[1] == [(0, q.id, 0.2), (1, p.id, 0.1)]


def test_llm_children_rejected_after_fitting_get_repairs_as_children_of_their_own():
    cfg = config()
    cfg.operator.kind, cfg.operator.repairs = "llm", 2
    b = books(cfg)
    bad, fine = program(EXPRS[1]), program(EXPRS[2])

    def fit(prog, seed):
        if prog.id == bad.id:
            return scored(0.5, reason="physics: step time grows by 0.0 us")
        return scored(0.25)

    pool = ScriptedPool(fit)
    props = [Proposal(bad.source, "llm:mutate", ("P",)), Proposal(fine.source, "llm:mutate", ())]
    rows = evaluate_children(b, pool, cfg, 1, props, probe())
    evals = _evals(rows)
    assert [e.operator for e in evals] == ["llm:mutate", "llm:mutate",
                                           "repair:context_term", "repair:floor_context"]
    assert [e.seq for e in evals] == [0, 1, 2, 3]
    repaired = [r for r in _programs(rows) if r.operator.startswith("repair:")]
    assert [r.parent_ids for r in repaired] == [[bad.id], [bad.id]]
    # the repairs' fit seeds continue after the proposals' positions
    assert [s for _p, s in pool.maps[1]] == [child_seed(7, 1, 2), child_seed(7, 1, 3)]
    assert b.state.rejections == {"P": ["physics: step time grows by 0.0 us"]}
    # the offline operator's rejected children are not repaired
    cfg.operator.kind = "offline"
    b = books(cfg)
    rows = evaluate_children(b, ScriptedPool(fit), cfg, 1, props, probe())
    assert len(_evals(rows)) == 2
