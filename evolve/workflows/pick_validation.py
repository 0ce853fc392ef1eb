"""``evolve report --validate``: the closed-loop validation of a run's pick, for the report.

Why here: the report (``evolve.report``) is read-only over the archive and sits below the
workflows; the simulation is :func:`evolve.workflows.validation.validate`, exactly what
``evolve validate PICK`` runs (every run of the data directory whole, closed loop, in the
engine loop and simulator settings the run was searched with, at the constants of the
pick's latest accepted evaluation in that run). This module runs it, writes its plots and
``plots.json`` into a directory, and returns the table and lines as plain strings for the
report's validation page (:class:`evolve.report.validation.WholeRuns`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from evolve.archive import Archive
from evolve.errors import UserError
from evolve.report.validation import PLOTS_OF, WholeRuns, constants_digest
from evolve.workflows.targets import infer_scope, on_all_cores, parse_stored


def validate_pick(archive: str | Path, run_id: int | None, data: str | None,
                  plots_dir: Path, progress: Callable[[str], None] | None = None
                  ) -> WholeRuns:
    """Simulate the pick of ``run_id`` (default: the latest run) on every run of ``data``;
    its plots go to ``plots_dir``. A run without a pick is a :class:`UserError`."""
    from evaluator.api import Evaluator
    from evolve.fitting import const_map
    from evolve.program.codegen import step_model
    from evolve.workflows import validation as v

    with Archive(archive, create=False) as ar:
        rid = ar.latest_run_id() if run_id is None else run_id
        run = ar.run(rid)
        pid = next((r.program_id for r in ar.frontier(rid) if r.picked), None)
        if pid is None:
            raise UserError(f"--validate: run {rid} has no pick yet (no generation committed)")
        ev_row = ar.latest_accepted(rid).get(pid)
        if ev_row is None or not ev_row.constants:
            raise UserError(f"--validate: the pick {pid[:12]} has no accepted evaluation")
        program = parse_stored(ar.program(pid, rid)[0].source, pid, f"archive {ar.path}")
        groups = ev_row.constants
    cfg = dict((run.config or {}).get("run") or {})
    ev = on_all_cores(Evaluator.from_data(
        data, prompt_cache=bool(cfg.get("prompt_cache", True)),
        async_scheduling=bool(cfg.get("async_scheduling", True)),
        loop=str(cfg.get("loop", "vllm")), step_noise=float(cfg.get("step_noise", 0.0))))
    scope = infer_scope(groups, ev.scenarios)
    val = v.validate(ev, step_model(program), const_map(program, groups, ev.scenarios, scope),
                     None, progress=progress)
    splits = dict(run.splits or {})
    for name, m in val.metrics.items():  # the run's own splits, where it had the run
        m.split = splits.get(name, m.split)
    plots_dir.mkdir(parents=True, exist_ok=True)
    v.plot(val, plots_dir, f"pick {pid[:12]}")
    (plots_dir / PLOTS_OF).write_text(json.dumps(
        {"program": pid, "constants": constants_digest(groups), "label": pid[:12],
         "scope": scope, "runs": sorted(val.metrics)}, indent=1, sort_keys=True) + "\n")
    lines = [*v.summary_lines(val.metrics), *v.drift_lines(val), *v.context_lines(val),
             *v.sensitivity_lines(val), *v.envelope_lines(val)]
    return WholeRuns(pid, scope, ev.scenarios[0].loop, v.table_headers(),
                     v.table_rows(val.metrics), lines)
