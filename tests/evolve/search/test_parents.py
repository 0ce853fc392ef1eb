"""Parents and inspirations (evolve.search.parents): operators see training errors only,
the worst training runs first, and selection draws from the run's seeded stream (the same
seed and generation select the same parents, as a resumed run must)."""

from __future__ import annotations

from search_fakes import EXPRS, TRAIN, VALIDATE, books, config, program, scored

from evolve.search.parents import choose, parent_view, worst_table
from evolve.search.pareto import select_parents
from evolve.search.rng import PURPOSE_SELECT, generation_rng
from evolve.search.transfer import SPLIT as TRANSFER


def _row(ape: float, e2e: float = 2.0) -> dict:
    return {"ape": {"e2e_mean": ape}, "pred": {"e2e_mean": e2e, "ttft_mean": 0.05,
                                               "itl_mean": 0.0125},
            "meas": {"e2e_mean": 1.0, "ttft_mean": 0.04, "itl_mean": 0.01}}


def test_worst_table_ranks_by_e2e_error_and_skips_incomplete_rows():
    train = {"a": _row(0.1), "b": _row(0.9), "c": _row(0.5), "no_ttft": _row(2.0)}
    del train["no_ttft"]["meas"]["ttft_mean"]
    lines = worst_table(train).splitlines()
    assert lines[0].startswith("| run (load stage slice) |") and lines[1] == "|---|---|---|---|"
    assert [ln.split(" | ")[0] for ln in lines[2:]] == ["| b", "| c", "| a"]
    # seconds for E2E, milliseconds for TTFT and the decode interval
    assert lines[2] == "| b | 2.000 / 1.000 | 50.0 / 40.0 | 12.50 / 10.00 |"
    assert len(worst_table(train, rows=2).splitlines()) == 2 + 1  # rows counts ranked entries
    assert worst_table({"x": {"ape": {}, "pred": {}, "meas": {}}}) == ""
    assert worst_table({}) == ""


def test_parent_view_shows_training_and_transfer_errors_only():
    b = books()
    p = program(EXPRS[1])
    res = scored(0.2, val=0.7)
    res.metrics[f"{TRAIN}~lomo"] = {**res.metrics[TRAIN], "split": TRANSFER}
    res.metrics["run_test"] = {**res.metrics[TRAIN], "split": "test"}
    b.accept(p, res, 1)
    for reason in ("physics: a", "fit failed: b"):
        b.note_rejection(p.id, reason)
    view = parent_view(b, p.id)
    assert set(view.train_errors) == {TRAIN, f"{TRAIN}~lomo"}  # no validate, no test
    assert VALIDATE not in view.worst_batches and "~lomo" not in view.worst_batches
    assert TRAIN in view.worst_batches
    err = view.train_errors[TRAIN]
    assert err["e2e_mean"] == 0.2 and err["pred_e2e_mean"] == 1.2 and err["meas_itl_mean"] == 0.01
    assert (view.program, view.loss, view.constants) == (p, 0.2, res.groups)
    assert view.rejections == ("physics: a", "fit failed: b")


def _filled(cfg):
    b = books(cfg)
    losses = (0.50, 0.30, 0.35, 0.20, 0.25)
    for expr, loss in zip(EXPRS, losses, strict=True):
        b.accept(program(expr), scored(loss), 0)
    return b


def test_choose_draws_tournament_winners_from_the_seeded_stream():
    cfg = config(children=3, parents_per_child=2, inspirations=2)
    b = _filled(cfg)
    parents, insp = choose(b, cfg, 4)
    expected = select_parents(b.state.grid.elites(),
                              generation_rng(cfg.run.seed, 4, PURPOSE_SELECT), 6)
    assert [p.program.id for p in parents] == [e.program_id for e in expected]
    again, _ = choose(_filled(cfg), cfg, 4)  # a resumed run selects the same
    assert [p.program.id for p in again] == [p.program.id for p in parents]
    draws = {tuple(p.program.id for p in choose(b, cfg, g)[0]) for g in range(1, 6)}
    assert len(draws) > 1  # each generation has its own stream
    # inspirations: the frontier's best losses first
    front = sorted(b.frontier().members, key=lambda e: e.loss)
    assert [i.program.id for i in insp] == [e.program_id for e in front[:2]]
    assert [i.loss for i in insp] == sorted(i.loss for i in insp)


def test_choose_sizes_follow_the_config():
    cfg = config(children=4, parents_per_child=3, inspirations=10)
    b = _filled(cfg)
    parents, insp = choose(b, cfg, 1)
    assert len(parents) == 12
    assert len(insp) == len(b.frontier().members) <= 10
    ids = {e.program_id for e in b.state.grid.elites()}
    assert {p.program.id for p in parents} <= ids
