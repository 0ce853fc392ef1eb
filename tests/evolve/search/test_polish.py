"""Closed-loop refits start from the better of the fitted and the declared constants."""

from __future__ import annotations

from pathlib import Path

from evaluator.api import Evaluator
from evolve.config.schema import Config, apply_dict, validate
from evolve.fitting import const_map
from evolve.program.codegen import step_model
from evolve.program.language import parse_program
from evolve.search import polish
from evolve.search.context import make_context
from evolve.search.judge import score_program
from evolve.search.polish import closed_refit, declared_groups

SEEDS = Path(__file__).resolve().parents[3] / "seeds"


def test_refit_starts_from_declared_constants_when_they_judge_better(small_scenarios,
                                                                     monkeypatch):
    cfg = Config()
    apply_dict(cfg, {"fit": {"slice_seconds": 40.0, "slice_warmup_seconds": 10.0}}, "test")
    cfg = validate(cfg, "test")
    ev = Evaluator(small_scenarios)
    p = parse_program((SEEDS / "roofline.py").read_text())
    ev.refresh_corpora(step_model(p), const_map(p, {}, ev.scenarios, "global"))
    ctx = make_context(cfg, ev, dict.fromkeys(ev.names(), "train"))
    declared = declared_groups(ctx, p)
    pooled = {"global"} if cfg.fit.scope == "pooled" else set()  # pooled: the shared set too
    assert sorted(declared) == sorted({sc.model for sc in small_scenarios} | pooled)
    assert all(g == dict(zip(p.const_names, p.init_vector(), strict=True))
               for g in declared.values())
    # a "fit" that landed on 40 ms of overhead per step: far worse than the declared values
    bad = {g: {**v, "overhead_us": 40000.0} for g, v in declared.items()}
    res = score_program(ctx, p, bad)
    at_declared = score_program(ctx, p, declared)
    assert at_declared.ok and res.loss > at_declared.loss
    starts: list[dict] = []  # where each closed-loop fit starts (the real fit runs)

    def spy(*args, **kw):
        starts.append(kw["start"])
        return real(*args, **kw)

    real = polish.closed_loop_fit
    monkeypatch.setattr(polish, "closed_loop_fit", spy)
    out = closed_refit(ctx, cfg, p, res, evals=30, salt=0, g=0)
    assert starts == [declared]  # the declared constants judge better: the refit starts there
    assert out is not res and out.loss < at_declared.loss  # ... and improves on them
    assert all(v["overhead_us"] < 40000.0 for v in out.groups.values())
    # already better than the declared constants: the refit starts from the fit
    kept = closed_refit(ctx, cfg, p, out, evals=4, salt=1, g=0)
    assert starts[1:] == [out.groups] and kept.loss <= out.loss
