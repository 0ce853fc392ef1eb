"""Judging a child: the best of ``fit.starts`` teacher-forced fits, judged closed loop."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from evaluator.api import Evaluator
from evolve.config.schema import Config, apply_dict, validate
from evolve.fitting import const_map
from evolve.fitting.bounds import derived_seed
from evolve.program.codegen import step_model
from evolve.program.language import parse_program
from evolve.search.context import make_context
from evolve.search.judge import fit_and_score, fit_once, score_program

SEEDS = Path(__file__).resolve().parents[3] / "seeds"


def _context(scenarios, starts):
    cfg = Config()
    apply_dict(cfg, {"fit": {"max_evals": 30, "restarts": 0, "window_steps": 300,
                             "starts": starts, "slice_seconds": 40.0,
                             "slice_warmup_seconds": 10.0}}, "test")
    cfg = validate(cfg, "test")
    ev = Evaluator(scenarios)
    boot = parse_program((SEEDS / "linear.py").read_text())
    ev.refresh_corpora(step_model(boot), const_map(boot, {}, ev.scenarios, "global"), 300)
    return make_context(cfg, ev, dict.fromkeys(ev.names(), "train"))


def test_the_lowest_closed_loop_training_loss_of_the_starts_is_kept(small_scenarios):
    ctx = _context(small_scenarios, starts=3)
    assert ctx.starts == 3
    prog = parse_program((SEEDS / "layered.py").read_text())
    seeds = [11, derived_seed(11, "start", 1), derived_seed(11, "start", 2)]
    singles = [fit_once(ctx, prog, s) for s in seeds]
    assert len({round(r.loss, 12) for r in singles}) > 1  # independent streams
    kept = fit_and_score(ctx, prog, 11)
    ok = [r for r in singles if r.ok]
    want = min(ok, key=lambda r: r.loss) if ok else singles[0]
    assert kept.loss == want.loss and kept.groups == want.groups
    assert kept.n_evals == sum(r.n_evals for r in singles)
    # one start is the single fit from the job's own seed (the behaviour before)
    one = fit_and_score(dataclasses.replace(ctx, starts=1), prog, 11)
    assert one.loss == singles[0].loss and one.groups == singles[0].groups


def test_train_only_scoring_gives_the_training_loss_of_the_full_score(small_scenarios):
    ctx = _context(small_scenarios, starts=1)
    names = ctx.names
    ctx.splits = {names[0]: "train", names[1]: "train", names[2]: "validate",
                  names[3]: "test"}
    prog = parse_program((SEEDS / "layered.py").read_text())
    full = fit_once(ctx, prog, 5)
    trial = fit_once(ctx, prog, 5, train_only=True)
    assert trial.loss == full.loss and trial.reason == full.reason
    assert trial.groups == full.groups
    assert {m["split"] for m in trial.metrics.values()} == {"train"}
    assert {m["split"] for m in full.metrics.values()} == {"train", "validate", "test"}
    assert trial.metrics == {n: m for n, m in full.metrics.items() if m["split"] == "train"}


def test_physics_judges_per_model_constants_only_where_a_fit_chose_them(small_scenarios):
    """Per model, a model without training runs keeps the declared constants, which nothing
    tuned: judging the program there would reject it for values no fit chose. A shared
    (pooled) set is what such a model gets, so there every model is judged."""
    ctx = _context(small_scenarios, starts=1)
    names = ctx.names
    ctx.splits = {**dict.fromkeys(names[:3], "train"), names[3]: "test"}
    prog = parse_program('CONSTANTS = {"s": (1.0, 0.5, 2.0), "b": (-1e9, -2e9, 1e5)}\n'
                         "def step_time(f, c):\n"
                         "    return c.s * (f.k_step + f.weight_read + f.kv_read) + c.b\n")
    fitted = {"s": 1.0, "b": 100.0}  # what a fit on the training runs would choose
    train_models = {ctx.evaluator.by_name[n].model for n in names[:3]}
    per_model = dataclasses.replace(ctx, scope="per_model")
    res = score_program(per_model, prog, dict.fromkeys(train_models, fitted))
    assert res.ok, res.reason  # the test model's declared -1e9 is not judged
    pooled = dataclasses.replace(ctx, scope="pooled")
    bad = score_program(pooled, prog, {**dict.fromkeys(train_models, fitted),
                                       "global": {"s": 1.0, "b": -1e9}})
    held_out = ctx.evaluator.by_name[names[3]].model
    assert not bad.ok and bad.reason.startswith(f"physics ({held_out}): step time -")


def test_the_kept_start_reuses_its_training_slices(small_scenarios):
    """score_program with ``sims``: the training slices a start was judged on are not
    simulated again when it is scored on every run, and the score is the one without."""
    ctx = _context(small_scenarios, starts=1)
    names = ctx.names
    ctx.splits = {names[0]: "train", names[1]: "train", names[2]: "validate",
                  names[3]: "test"}
    prog = parse_program((SEEDS / "layered.py").read_text())
    trial = fit_once(ctx, prog, 5, train_only=True)
    sims: dict = {}
    again = score_program(ctx, prog, trial.groups, train_only=True, sims=sims)
    n_train = len(sims)
    assert n_train == sum(ctx.splits[p] == "train" for p in ctx.slice_parent.values()) > 0
    before = dict(sims)
    full = score_program(ctx, prog, trial.groups, sims=sims)
    assert all(sims[k] is v for k, v in before.items())  # reused, not re-simulated
    assert len(sims) == len(ctx.slice_parent) > n_train  # the held-out slices were added
    plain = score_program(ctx, prog, trial.groups)
    assert (full.loss, full.reason, full.metrics) == (plain.loss, plain.reason, plain.metrics)
    assert again.loss == trial.loss
