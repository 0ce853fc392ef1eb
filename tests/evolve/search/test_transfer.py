"""The transfer loss: each model's training runs priced by constants fitted without it."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from evaluator.api import Evaluator
from evolve.cli.main import main
from evolve.config.schema import Config, ConfigError, apply_dict, validate
from evolve.fitting import const_map, fit_program
from evolve.program.codegen import step_model
from evolve.program.language import parse_program
from evolve.search.context import make_context
from evolve.search.judge import fit_once, score_program
from evolve.search.transfer import SPLIT, fitting_loss, search_loss, transfer_metrics

ROOT = Path(__file__).resolve().parents[3]
SEEDS = ROOT / "seeds"


def _context(scenarios, weight=0.0, margin=0.0):
    cfg = Config()
    apply_dict(cfg, {"fit": {"max_evals": 40, "restarts": 0, "window_steps": 300,
                             "starts": 1, "slice_seconds": 40.0, "slice_warmup_seconds": 10.0,
                             "transfer_weight": weight, "transfer_margin": margin}}, "test")
    cfg = validate(cfg, "test")
    ev = Evaluator(scenarios)
    boot = parse_program((SEEDS / "linear.py").read_text())
    ev.refresh_corpora(step_model(boot), const_map(boot, {}, ev.scenarios, "global"), 300)
    return make_context(cfg, ev, dict.fromkeys(ev.names(), "train"))


def test_the_search_loss_is_a_hinge_on_the_transfer_loss():
    assert search_loss(0.05, 0.07, 1.0, 0.08) == 0.05  # within the margin: free
    assert search_loss(0.05, 0.18, 1.0, 0.08) == pytest.approx(math.hypot(0.05, 0.10))
    assert search_loss(0.05, 0.18, 4.0, 0.0) == pytest.approx(math.hypot(0.05, 0.36))
    assert search_loss(0.05, 0.90, 0.0, 0.0) == 0.05  # off
    assert search_loss(0.05, math.nan, 1.0, 0.0) == 0.05  # unmeasured (one model)
    assert search_loss(0.05, math.inf, 1.0, 0.0) == math.inf


def test_each_run_is_priced_by_constants_fitted_without_its_model(small_scenarios):
    ctx = _context(small_scenarios, weight=1.0)
    prog = parse_program((SEEDS / "layered.py").read_text())
    held = transfer_metrics(ctx, prog)
    assert sorted(held) == sorted(n + "~lomo" for n in ctx.train)
    assert {m.split for m in held.values()} == {SPLIT}
    # the 7B run's price: the global set of the run's (pooled) fit on the three other
    # models' runs, which the fold fits alone
    ev = ctx.evaluator
    name = next(n for n in ctx.train if "7b" in n)
    rest = [n for n in ctx.train if ev.by_name[n].model != ev.by_name[name].model]
    fit = fit_program(prog, ev, rest, "pooled", int(prog.id[:12], 16), ctx.max_evals,
                      ctx.restarts, probes=ctx.probes, pool_strength=ctx.pool_strength,
                      prior_strength=ctx.prior_strength)
    assert ev.by_name[name].model not in fit.groups  # it had no constants of its own
    want = ev.score(step_model(prog), const_map(prog, fit.groups, ev.scenarios, "pooled"),
                    names=[name])[name]
    assert held[name + "~lomo"].pred == want.pred


def test_score_program_prices_transfer_only_when_weighted(small_scenarios):
    prog = parse_program((SEEDS / "layered.py").read_text())
    off = _context(small_scenarios)
    base = fit_once(off, prog, 3)
    assert base.ok and not any(m["split"] == SPLIT for m in base.metrics.values())
    on = dataclasses.replace(off, transfer_weight=1.0, transfer_margin=0.0)
    priced = score_program(on, prog, base.groups)
    t = fitting_loss(priced.metrics, SPLIT)
    assert math.isfinite(t) and t > 0
    assert fitting_loss(priced.metrics, "train") == pytest.approx(base.loss, rel=1e-12)
    assert priced.loss == pytest.approx(math.hypot(base.loss, t), rel=1e-12)
    assert {m["mode"] for m in priced.metrics.values() if m["split"] == SPLIT} == {
        "lomo_teacher_forced"}
    # judging the starts of a fit reads the training runs alone: no transfer fits
    assert score_program(on, prog, base.groups, train_only=True).loss == base.loss
    # a property of the program: other constants, the same transfer
    other = {g: {k: v * 1.01 for k, v in c.items()} for g, c in base.groups.items()}
    assert fitting_loss(score_program(on, prog, other).metrics, SPLIT) == t
    # within the margin the search loss is the training loss
    wide = dataclasses.replace(on, transfer_margin=t + 0.01)
    assert score_program(wide, prog, base.groups).loss == pytest.approx(base.loss, rel=1e-12)


def test_the_settings_are_checked_and_stored_only_when_on(capsys):
    assert main(["run", "--print-config", "--transfer", "0.5"]) == 0
    assert "transfer_weight = 0.5" in capsys.readouterr().out
    assert main(["run", "--print-config", "--transfer", "-1"]) == 2
    assert "fit.transfer_weight" in capsys.readouterr().err
    cfg = Config()
    assert "transfer_weight" not in cfg.stored_dict()["fit"]  # off: archives as before
    apply_dict(cfg, {"fit": {"transfer_weight": 2.0}}, "t")
    assert cfg.stored_dict()["fit"]["transfer_weight"] == 2.0
    assert Config.from_dict(cfg.stored_dict()).fit.transfer_weight == 2.0
    for key, bad in (("transfer_weight", -1.0), ("transfer_margin", float("nan"))):
        c = Config()
        apply_dict(c, {"fit": {key: bad}}, "t.toml")
        with pytest.raises(ConfigError, match=f"t.toml: key 'fit.{key}' out of range"):
            validate(c, "t.toml")


CONFIG = """
[run]
seed = 3
generations = 2
head_seconds = 20.0
scenarios = ["20260217-155451-llama-2-7b-tp1-codegen",
             "20260218-130541-mixtral-8x7b-v0-1-tp2-general",
             "20260218-150956-codellama-34b-tp2-codegen"]
workers = 1
progress = false
[search]
children = 3
[fit]
max_evals = 40
restarts = 0
starts = 1
window_steps = 300
seed_polish_evals = 0
polish_evals = 0
transfer_weight = 1.0
transfer_margin = 0.0
"""


@pytest.mark.slow
@pytest.mark.real_data
def test_a_run_that_prices_transfer_shows_and_replays_it(tmp_path):
    (tmp_path / "t.toml").write_text(CONFIG)
    db = str(tmp_path / "a.db")

    def evolve(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "evolve.cli.main", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    evolve("run", "--config", str(tmp_path / "t.toml"), "--archive", db)
    members = json.loads(evolve("frontier", "--archive", db, "--json"))["members"]
    for m in members:
        assert math.isfinite(m["transfer_loss"]) and m["train_loss"] > 0
        assert m["loss"] == pytest.approx(math.hypot(m["train_loss"], m["transfer_loss"]))
    text = evolve("frontier", "--archive", db)
    assert "transfer" in text.splitlines()[1]
    best = min(members, key=lambda m: m["loss"])["id"]
    assert "~lomo" in evolve("show", best[:12], "--archive", db)
    assert evolve("replay", best[:12], "--archive", db).startswith("ok ")
