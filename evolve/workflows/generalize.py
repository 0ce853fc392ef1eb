"""``evolve generalize``'s work: hold out a model or a workload, fit on the rest, simulate.

For every fold, the program's constants are fitted on the runs that remain (teacher forced,
then polished closed loop on stage slices) and the held-out runs are simulated closed loop,
and again at step times 3 % shorter and longer: a miss on a run at its knee (mean E2E
moving several times the step-time change) is a small step-time error. A refitted fold
also simulates the runs it was fitted on (``fitted``): a held-out miss of a fold that
misses its own runs is partly a fitting failure, not only a generalisation one.
Leave-one-model-out asks what the program predicts for a model nobody measured. By default
(``--unseen layered``, docs/selection.md's rule) the `layered` seed is fitted globally
without the held-out model, simulates the held-out model's normal workloads, and the
program's constants for that model are calibrated to it (:func:`carry_to`); the program's
own fit is not needed. ``--unseen global`` gives the held-out model the program's global
set fitted without it (a pooled program's global set that the models' sets shrink to): the
per-model constants of a searched program do not transfer that way. Leave-one-workload-out
keeps the program's usual per-model sets. Reasoning runs are never fitted on (they are
overloaded: teacher forcing cannot price their queues), but are reported when held out.
:func:`generalize` returns a :class:`Generalization`; the command renders it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evolve.assess.heldout import normal_within
from evolve.config.schema import FitSection
from evolve.errors import UserError
from evolve.fitting.refit import refit_fold
from evolve.program.codegen import step_model
from evolve.workflows.targets import (
    RULE,
    check_groups,
    infer_scope,
    note_roofline_kernels,
    on_all_cores,
    rule_program,
)

if TYPE_CHECKING:
    from evaluator.api import ConstMap, Evaluator
    from evolve.program.language import Program


@dataclass
class GeneralizeOptions:
    """What ``evolve generalize`` was asked for (its flags; ranges checked)."""

    mode: str  # lomo | lowo
    scope: str | None = None  # None: from the program's groups and the mode
    seed: int = 7
    max_evals: int = 3000
    polish_evals: int | None = None  # None: fit.polish_evals
    prior: float = FitSection.prior_strength
    pool: float = FitSection.pool_strength
    unseen: str | None = None  # lomo: layered (default) | global
    data: str | None = None
    simulator: dict[str, Any] = field(default_factory=dict)  # targets.simulator_options
    constants: str | None = None  # the --constants file the groups came from, if any


@dataclass
class Generalization:
    """Every fold's held-out runs, simulated at the constants the fold gave them."""

    program: Program
    mode: str
    seed: int
    scope: str
    max_evals: int
    polish_evals: int
    unseen: str  # layered: held-out constants calibrated to the rule; global: refitted
    folds: dict[str, dict[str, Any]]  # fold -> held-out run -> RunMetrics.to_dict()
    sensitivity: dict[str, dict]  # fold -> run -> mean E2E change at step times -/+3 %
    constants: dict[str, dict]  # fold -> its constants (or the carry's record)
    fitted: dict[str, dict]  # refitted fold -> its fitted runs' APEs, closed loop
    hits: int  # held-out normal runs within 10 % mean E2E
    n_normal: int

    def as_dict(self) -> dict[str, Any]:
        """``evolve generalize --json``'s document."""
        return {"program": self.program.id, "mode": self.mode, "seed": self.seed,
                "scope": self.scope, "max_evals": self.max_evals,
                "polish_evals": self.polish_evals, "folds": self.folds,
                "sensitivity": self.sensitivity, "unseen": self.unseen,
                "constants": self.constants, "fitted": self.fitted,
                "normal_within_10pct": {"runs": self.hits, "of": self.n_normal}}


def check_mode(opts: GeneralizeOptions) -> None:
    """``--unseen`` names how a held-out *model* gets constants (checked before the
    program loads)."""
    if opts.unseen and opts.mode != "lomo":
        raise UserError("--unseen: applies to --mode lomo (a held-out model); "
                        "--mode lowo holds out workloads of measured models")


def unseen_of(opts: GeneralizeOptions, label: str) -> str:
    """How the held-out runs get constants (``layered``: calibrated to the rule, the
    default of lomo; ``global``: the program refitted), with the flags that contradict it
    refused before any run is loaded."""
    check_mode(opts)
    unseen = "global" if opts.mode != "lomo" or label == RULE else (opts.unseen or RULE)
    for flag, given in (("--scope", opts.scope), ("--polish-evals", opts.polish_evals)):
        if unseen == RULE and given is not None:  # carry_to neither scopes nor polishes
            raise UserError(f"{flag} {given}: not used when the held-out model is "
                            f"calibrated to `{RULE}` (--unseen {RULE}, the default of --mode "
                            "lomo); pass --unseen global to refit the program's folds")
    if opts.mode == "lomo" and opts.scope == "per_model":  # its runs all held out
        raise UserError("--scope per_model: --mode lomo holds out a whole model, so it gets "
                        "no fitted set of its own (its runs would be simulated at the "
                        "declared values); pass --scope global or pooled")
    return unseen


def generalize(program: Program, groups: dict[str, Any], label: str, opts: GeneralizeOptions,
               say: Callable[[str], None]) -> Generalization:
    """Every fold of ``opts.mode``: constants from the remaining runs, the held-out runs
    simulated closed loop (and at step times -/+3 %). ``groups``: the program's fitted
    constants, where a refit starts; ``label``: its name (a seed's, the rule's)."""
    from evaluator.api import Evaluator, e2e_response
    from evolve.fitting import const_map

    unseen = unseen_of(opts, label)
    polish_evals = FitSection.polish_evals if opts.polish_evals is None else opts.polish_evals
    ev = on_all_cores(Evaluator.from_data(opts.data, **opts.simulator))
    note_roofline_kernels(program, ev.scenarios)
    if opts.constants:
        check_groups(groups, ev.scenarios, f"--constants {opts.constants}")
    pooled = infer_scope(groups, ev.scenarios) == "pooled" if groups else False
    scope = opts.scope or ("pooled" if pooled else "global" if opts.mode == "lomo"
                           else "per_model")
    key = (lambda s: s.model) if opts.mode == "lomo" else (lambda s: s.workload)
    normal_names = {s.name for s in ev.scenarios if s.workload != "reasoning"}
    folds = sorted({key(s) for s in ev.scenarios if s.name in normal_names})
    if len(folds) < 2:
        what = "models" if opts.mode == "lomo" else "workloads"
        raise UserError(f"--mode {opts.mode}: needs normal (non-reasoning) runs of at least "
                        f"two {what} to hold one out; the data has {len(folds)}")
    model = step_model(program)
    start_groups = groups if scope != "global" or set(groups) == {"global"} else {}
    out: dict[str, dict] = {}
    fold_consts: dict[str, dict] = {}
    knees: dict[str, dict] = {}
    fits: dict[str, dict] = {}
    for held in folds:
        train = [s.name for s in ev.scenarios if key(s) != held and s.workload != "reasoning"]
        test = [s.name for s in ev.scenarios if key(s) == held]
        say(f"fold {held}: fit on {len(train)} runs, validate on {len(test)}")
        if unseen == RULE:
            fold_consts[held], consts = carry_to(program, ev, train, test, normal_names, opts)
        else:
            fitted = refit_fold(program, ev, train, scope, start_groups, opts.seed,
                                opts.max_evals, polish_evals, opts.prior, opts.pool)
            fold_consts[held] = fitted
            consts = const_map(program, fitted, ev.scenarios, scope)
            fits[held] = fitted_apes(ev.simulate(model, consts, names=train))
        sims = ev.simulate(model, consts, names=test)
        out[held] = {n: r.metrics.to_dict() for n, r in sims.items()}
        knees[held] = e2e_response(ev.simulate, model, consts, sims)
    hits, n_normal = normal_within(out, normal_names)
    return Generalization(program, opts.mode, opts.seed, scope, opts.max_evals, polish_evals,
                          unseen, out, knees, fold_consts, fits, hits, n_normal)


def carry_to(program: Program, ev: Evaluator, train: list[str], test: list[str],
             normal: set[str], opts: GeneralizeOptions) -> tuple[dict, ConstMap]:
    """The held-out model's constants by docs/selection.md's rule
    (:func:`evolve.fitting.calibrate.carry`: `layered` fitted on ``train``, the program
    calibrated to it on the held-out normal runs' workloads). Returns what the JSON
    stores and the constants of the held-out runs."""
    from evolve.fitting import const_map
    from evolve.fitting.calibrate import carry

    record = carry(program, rule_program(), ev, train, [n for n in test if n in normal],
                   seed=opts.seed, max_evals=opts.max_evals, prior=opts.prior,
                   pool=opts.pool)
    return record, const_map(program, {"global": record["calibrated"]},
                             [ev.by_name[n] for n in test], "global")


def fitted_apes(sims: dict) -> dict[str, dict[str, float]]:
    """Each fitted run's mean E2E / TTFT / decode APE, closed loop, at the fold's
    constants: whether the fold fits its own runs, which tells a fitting failure from a
    generalisation one (docs/selection.md, "How `evolve generalize` fits a fold")."""
    keys = ("e2e_mean", "ttft_mean", "itl_mean")
    return {n: {k: float(r.metrics.ape.get(k, float("inf"))) for k in keys}
            for n, r in sorted(sims.items())}
