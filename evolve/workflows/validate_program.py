"""``evolve validate``'s work: one program simulated closed loop on every measured run of a split.

The program and its constant groups come from :func:`evolve.workflows.targets.load_fitted`
(an archived pick, a program file or a seed name); :func:`validate_program` loads the data
with the simulator options and step-time noise asked for, resolves the scope, simulates
(:func:`evolve.workflows.validation.validate`) and returns a :class:`ProgramValidation`;
:func:`write_plots` writes the PNG plots and ``plots.json`` (whose plots they are, for
``evolve report --validate-dir``). The command renders the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolve.errors import UserError
from evolve.program.codegen import step_model
from evolve.text.words import LOOP_NAMES
from evolve.workflows.targets import infer_scope, note_roofline_kernels, on_all_cores, scope_of

if TYPE_CHECKING:
    from evolve.program.language import Program
    from evolve.workflows.validation import Validation

Say = Callable[[str], None]


@dataclass
class ValidateOptions:
    """What ``evolve validate`` was asked for (its flags, checked)."""

    split: str = "all"  # all | train | validate | test
    scope: str | None = None  # None: inferred from the constant groups, else global
    constants: str | None = None  # the --constants file the groups came from, if any
    data: str | None = None
    simulator: dict[str, Any] = field(default_factory=dict)  # targets.simulator_options
    step_noise: float = 0.0  # sd of log of the seeded step-time noise
    host_us_per_open: float = 0.0  # what-if host time per open request per step
    host_floor: str | None = None  # what-if floor under every step: "measured" or µs


@dataclass
class ProgramValidation:
    """The program's closed-loop validation and what it was simulated with."""

    program: Program
    label: str
    scope: str
    loop: str  # the engine loop simulated (vllm | blis)
    names: list[str]  # the runs simulated
    step_noise: float
    host_us_per_open: float
    host_floor_us: dict[str, float]  # the what-if floor of each run simulated (0: none)
    validation: Validation
    simulated: Any  # the groups, or {"groups", "scope"} when --scope differs from theirs

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        from evolve.workflows.validation import percentile_counts

        val = self.validation
        return {"program": self.program.id, "scope": self.scope, "loop": self.loop,
                "runs": {n: m.to_dict() for n, m in val.metrics.items()},
                "admission_drift": val.drift, "context_price": val.context_price,
                "sensitivity": val.sensitivity, "envelope": val.envelope,
                "step_noise": self.step_noise, "host_us_per_open": self.host_us_per_open,
                "host_floor_us": self.host_floor_us,
                "percentiles_within_10pct": percentile_counts(val.metrics)}


def validate_program(program: Program, groups: dict[str, Any], label: str,
                     opts: ValidateOptions, say: Say) -> ProgramValidation:
    """Simulate ``program`` at ``groups`` closed loop on ``opts.split``'s runs; ``say`` gets
    the progress lines."""
    from evaluator.api import Evaluator
    from evolve.fitting import const_map
    from evolve.workflows.validation import validate

    ev = on_all_cores(Evaluator.from_data(opts.data, **opts.simulator,
                                          step_noise=opts.step_noise,
                                          host_us_per_open=opts.host_us_per_open,
                                          host_floor_us=host_floors(opts.host_floor,
                                                                    opts.data)))
    note_roofline_kernels(program, ev.scenarios)
    names = ev.names(None if opts.split == "all" else opts.split)
    if not names:  # validate() reads no names as "every run"
        raise UserError(f"--split {opts.split}: no {opts.split} runs in the data directory")
    scope = scope_of(opts, groups, ev.scenarios, "global")
    # a --scope other than the groups' own simulates other constants per run: the report
    # must not take these plots for the run's (found in review)
    natural = infer_scope(groups, ev.scenarios) if groups else "global"
    simulated = groups if scope == natural else {"groups": groups, "scope": scope}
    consts = const_map(program, groups, ev.scenarios, scope)
    loop = ev.scenarios[0].loop
    say(f"validating {label} (scope {scope}) closed loop on {len(names)} runs, in "
        f"{LOOP_NAMES[loop]}...")
    val = validate(ev, step_model(program), consts, names,
                   progress=lambda n: say(f"  simulated {n}"))
    floors = {n: ev.by_name[n].host_floor_us for n in names}
    return ProgramValidation(program, label, scope, loop, names, opts.step_noise,
                             opts.host_us_per_open, floors, val, simulated)


def parse_host_floor(spec: str | None) -> str | float:
    """``--host-floor`` checked: ``"measured"``, a number of µs (0 for none), else a
    :class:`UserError` (found before any work)."""
    if spec is None or spec == "measured":
        return spec or 0.0
    try:
        value = float(spec)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and value < float("inf")):
        raise UserError(f"--host-floor: 'measured' or a finite number of µs >= 0 (got {spec!r})")
    return value


def host_floors(spec: str | None, data: str | None) -> float | dict[str, float]:
    """``--host-floor``: none (0), ``measured`` (each run's median sampled host time,
    :func:`evaluator.data.host_time.sampled_host_us`; a run without sampled steps has
    none) or a number of µs for every run (:func:`parse_host_floor`)."""
    floor = parse_host_floor(spec)
    if isinstance(floor, float):
        return floor
    from evaluator.api import data_dir, sampled_host_us

    return sampled_host_us(data_dir(data))


def write_plots(done: ProgramValidation, out: Path) -> list[Path]:
    """The PNG plots in ``out`` and ``plots.json`` saying whose they are (for ``report``);
    the plots' paths."""
    from evolve.report.validation import PLOTS_OF, constants_digest
    from evolve.workflows.validation import plot

    paths = plot(done.validation, out, done.label)
    (out / PLOTS_OF).write_text(json.dumps(
        {"program": done.program.id, "constants": constants_digest(done.simulated),
         "label": done.label, "scope": done.scope, "runs": sorted(done.names)},
        indent=1, sort_keys=True) + "\n")
    return paths
