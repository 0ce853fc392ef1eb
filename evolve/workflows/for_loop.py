"""Constants for the engine loop an exported model runs in, and the accuracy to expect there.

Why a module: ``evolve export-go`` hands BLIS users a model whose accuracy must be the one
they get inside BLIS. This decides whether the constants need a refit (fitted in another
loop than the target), runs it (:func:`evolve.fitting.loop_refit.refit_for_loop`) with the
archived run's own fitting rules, and words the per-run accuracy table the Go header and
the command print. The command only parses flags and renders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evaluator.api import Evaluator, RunMetrics
from evolve.assess.splits import SPLITS, assign_splits
from evolve.config.schema import Config
from evolve.errors import UserError
from evolve.fitting.loop_refit import LoopRefit, refit_for_loop, score_in_loop
from evolve.program.language import Program
from evolve.text.words import LOOP_NAMES, run_label
from evolve.workflows.targets import on_all_cores

Groups = dict[str, dict[str, float]]


# Where vLLM-loop constants run as fitted: stock BLIS forms steps without async scheduling.
VLLM_BLIS = ("; for a BLIS with vLLM's async scheduling (scripts/build_blis.py "
             "--async-scheduling, docs/blis.md), not stock BLIS (--loop blis)")


@dataclass
class LoopExport:
    """What ``export-go`` writes: constants for ``loop`` and their accuracy there."""

    loop: str
    fitted_loop: str | None  # the loop the input constants were fitted in (None: declared)
    groups: Groups
    refit: LoopRefit | None = None  # None: exported as given
    metrics: dict[str, RunMetrics] = field(default_factory=dict)  # every run, in ``loop``
    splits: dict[str, str] = field(default_factory=dict)

    @property
    def note(self) -> str:
        """One line on where the constants come from, for the header and stderr."""
        where = LOOP_NAMES[self.loop]
        if self.refit is None:
            if self.fitted_loop is None:
                return f"the program's declared values, not fitted; accuracy in {where}"
            return f"fitted in {LOOP_NAMES[self.fitted_loop]}, exported as they are" + (
                VLLM_BLIS if self.loop == "vllm" else "")
        r = self.refit
        how = (f"refitted in {where} from constants fitted in "
               f"{LOOP_NAMES[self.fitted_loop or 'vllm']} (teacher-forced fits and a "
               f"closed-loop polish, {r.n_evals} evaluations, seeded by the program id)")
        if r.kept_start:
            return (f"{how}: no refit beat them (training loss {r.start_train_loss:.4f}); "
                    "exported as they were")
        return f"{how}: training loss {r.start_train_loss:.4f} -> {r.train_loss:.4f}"


def fitting_config(stored: Mapping[str, Any] | None) -> Config:
    """The archived run's configuration (today's defaults for a program file)."""
    return Config.from_dict(dict(stored)) if stored else Config()


def for_loop(program: Program, groups: Mapping[str, Mapping[str, float]], scope: str,
             fitted_loop: str | None, loop: str, cfg: Config, data: str | None,
             refit: bool = True, evals: int | None = None,
             log: Callable[[str], None] | None = None) -> LoopExport:
    """Constants for ``loop``: refitted when they were fitted in another loop (and
    ``refit``), else as given; with every run's closed-loop accuracy in ``loop``."""
    from evolve.assess.physics import probes_for
    from evolve.fitting import group_key
    from evolve.search.context import sliced
    from evolve.search.setup import load_evaluator

    cfg = Config.from_dict(cfg.stored_dict())  # a copy: the run's runs, cut as it cut them
    cfg.run.data, cfg.run.loop = data or "", loop
    ev = load_evaluator(cfg)
    if "global" not in groups:  # only the runs the constants are for
        ev = Evaluator([s for s in ev.scenarios if group_key(s, scope) in groups])
        if not ev.scenarios:
            raise UserError(f"no measured run belongs to the constant groups "
                            f"({', '.join(sorted(groups))}) under scope {scope}")
    on_all_cores(ev)
    splits = assign_splits(ev.scenarios, cfg.split.mode)
    out = LoopExport(loop=loop, fitted_loop=fitted_loop,
                     groups={g: dict(v) for g, v in groups.items()}, splits=splits)
    if refit and fitted_loop is not None and fitted_loop != loop:
        train = sorted(n for n, s in splits.items() if s == "train")
        held = sorted(n for n, s in splits.items() if s == "validate")
        cut = [n for n in train if sliced(ev.by_name[n])]
        probes = probes_for(ev, list(splits)) if cfg.search.physics == "reject" else {}
        out.refit = refit_for_loop(
            program, groups, scope, ev, train, cut,
            evals=cfg.fit.polish_evals if evals is None else evals,
            pool_strength=cfg.fit.pool_strength, prior_strength=cfg.fit.prior_strength,
            probes=probes, slice_seconds=cfg.fit.slice_seconds,
            warmup_seconds=cfg.fit.slice_warmup_seconds, tf_evals=cfg.fit.max_evals,
            tf_restarts=cfg.fit.restarts, tf_starts=cfg.fit.starts, held=held, log=log)
        out.groups, out.metrics = out.refit.groups, out.refit.metrics
    else:
        out.metrics = score_in_loop(program, groups, scope, ev)
    return out


def accuracy_rows(exp: LoopExport) -> list[list[str]]:
    """Per run (training runs first, then validate, test): split, measured and simulated
    mean E2E and TTFT, and their errors, signed (simulated over measured)."""
    order = {s: i for i, s in enumerate(SPLITS)}
    rows = []
    for name in sorted(exp.metrics, key=lambda n: (order.get(exp.splits.get(n, ""), 9), n)):
        m = exp.metrics[name]
        row = [run_label(name), exp.splits.get(name, m.split)]
        for k in ("e2e_mean", "ttft_mean"):
            meas, pred = m.meas.get(k), m.pred.get(k)
            err = (f"{100 * (pred / meas - 1):+.1f}%" if m.valid and meas and pred is not None
                   else "-")
            row += [_s(meas), _s(pred if m.valid else None), err]
        rows.append(row)
    return rows


ACCURACY_HEADERS = ["run", "split", "E2E meas", "E2E sim", "E2E err", "TTFT meas", "TTFT sim",
                    "TTFT err"]


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"

