"""``evolve export-go``'s work: a program and its constants -> a BLIS ``LatencyModel`` Go file.

Two sources: an archive (the id's latest accepted evaluation in the chosen run gives the
constants, the scope and the scores: :func:`from_archive`), or a program file (constants
from ``--constants``, else the program's initial values: :func:`from_file`), so an export
also works without an archive. The model names BLIS may pass (``hw.Model``) are read from
the data directory's ``requests.json`` files when it is available (:func:`model_names`).
With data, the constants are scored (and refitted, when fitted in the other engine loop)
in the target loop (:mod:`evolve.workflows.for_loop`), and the accuracy table goes into the
Go header. :func:`export` returns a :class:`GoExport`; the command writes and says it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evolve.errors import ArchiveError, ExportError, ProgramError, UserError
from evolve.text.tables import table
from evolve.text.words import LOOP_NAMES

Say = Callable[[str], None]
Source = tuple[Any, dict, str, dict[str, Any], dict[str, Any] | None, str | None]


@dataclass
class ExportOptions:
    """What ``evolve export-go`` was asked for (its flags, checked)."""

    id: str  # a program file's path, else an archived id (or prefix)
    from_file: bool
    archive: str = "archive.db"
    run: int | None = None
    model: str | None = None  # export only this constant group
    constants: str | None = None  # program-file mode: JSON text or a .json file
    scope: str | None = None  # program-file mode
    alias: list[str] = field(default_factory=list)  # GROUP=NAME
    data: str | None = None
    loop: str = "blis"
    no_refit: bool = False
    fitted_loop: str | None = None  # program-file mode
    refit_evals: int | None = None
    bridge: str | None = None  # stock BLIS, vLLM-loop constants: "async" (None) or "refit"


# The Go header's engine-loop line for a model that carries async scheduling
# (scripts/blis_accuracy.py recognises the export by it).
CARRIED = ("fitted in vLLM's engine loop, exported as they are; the model carries vLLM's async "
           "scheduling (QueueingTime holds each request back to the step vLLM admits it to), "
           "for BLIS at the pinned commit (--bridge async)")


def carries_async(loop: str, bridge: str | None, fitted: str | None) -> bool:
    """Whether the Go model keeps vLLM's async scheduling itself: stock BLIS (``loop``
    blis), constants fitted in vLLM's loop and ``--bridge async`` (the default). Its
    constants then stay as fitted. Declared values (``fitted`` None) belong to no loop and
    get no clock."""
    return loop == "blis" and (bridge or "async") == "async" and fitted == "vllm"


def _check_bridge(opts: ExportOptions, fitted: str | None) -> None:
    """``--bridge`` chooses how vLLM-loop constants reach stock BLIS; given anywhere else
    it would be ignored, so it is refused."""
    if opts.bridge is None:
        return
    if opts.loop != "blis":
        raise UserError(f"--bridge {opts.bridge}: applies to --loop blis (stock BLIS); a "
                        "BLIS with async scheduling takes vLLM-loop constants as they are")
    if fitted != "vllm":
        what = ("were fitted in BLIS's engine loop" if fitted == "blis" else
                "are the program's declared values")
        raise UserError(f"--bridge {opts.bridge}: applies to constants fitted in vLLM's "
                        f"engine loop; these {what} and are exported as they are")


@dataclass
class GoExport:
    """The Go file's text and what it exports."""

    text: str
    program: Any  # evolve.program.language.Program
    scope: str
    constants: dict[str, dict[str, float]]  # the exported groups


def export(opts: ExportOptions, say: Say) -> GoExport:
    """Read the program and its constants, check the groups asked for, bring the constants
    to ``opts.loop`` (``say`` gets the refit's progress and the accuracy table) and
    write the Go source."""
    from evolve.export.go.writer import export_go

    source = from_file if opts.from_file else from_archive
    prog, consts, scope, meta, stored, fitted = source(opts)
    infos = group_infos(scope, sorted(consts), model_names(opts.data))
    for item in opts.alias:  # every flag checked before the refit's minutes of work
        group, sep, name = item.partition("=")
        if not sep or group not in infos or not name:
            raise UserError(f"--alias {item}: expected GROUP=NAME with GROUP one of "
                            f"{', '.join(sorted(infos))}")
        infos[group] = replace(infos[group], aliases=(*infos[group].aliases, name.lower()))
    chosen = sorted(_select(consts, infos, opts.model)) if opts.model else sorted(consts)
    if scope == "per_scenario" and len(chosen) > 1:
        raise UserError("per_scenario constants: pick one scenario with --model NAME "
                        f"({', '.join(sorted(consts))})")
    _check_bridge(opts, fitted)
    async_steps = carries_async(opts.loop, opts.bridge, fitted)
    target = replace(opts, loop="vllm") if async_steps else opts  # the constants' loop
    _require_runs_to_refit(target, chosen, scope, fitted)
    exp = _for_loop(target, prog, consts, scope, stored, fitted, say)
    if async_steps:
        note = CARRIED
    elif exp is not None:
        note = exp.note
    else:
        note = ("constants " + (f"fitted in {LOOP_NAMES[fitted]}" if fitted else
                                "declared by the program, not fitted")
                + (", exported as they are (--no-refit)" if opts.no_refit else
                   "; no data directory to check them"))
    meta["Engine loop"] = f"{opts.loop}: {note}"
    notes: list[str] = []
    if exp is not None:
        consts = exp.groups
        notes = accuracy_lines(exp, async_steps)
        say(f"constants: {note}")
        say("\n".join(notes))
    consts = {g: consts[g] for g in chosen}
    kernels = _kernels(prog, opts.data, infos, say)
    try:
        text = export_go(prog, consts, scope, infos, meta, kernels, notes, async_steps)
    except ExportError as exc:
        raise UserError(f"{opts.id}: {exc}") from None
    return GoExport(text, prog, scope, consts)


def model_names(data: str | None) -> dict[str, dict[str, Any]]:
    """Per experiment: model short name, model id, TP (read from each requests.json head).

    Only the first few KB are read: these fields precede the (large) request list.
    """
    from evaluator.api import DataError, data_dir

    if data is not None:  # named on purpose: a typo must not drop the aliases silently
        root = data_dir(data)
    else:
        try:
            root = data_dir(None)
        except DataError:
            return {}
    out: dict[str, dict[str, Any]] = {}
    for req in sorted((root / "experiments").glob("*/requests.json")):
        with open(req, encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
        found = {k: re.search(rf'"{k}"\s*:\s*"?([^",}}]+)', head)
                 for k in ("model_id", "model_short", "tensor_parallelism")}
        if found["model_id"] is None:
            continue
        mid = found["model_id"].group(1)
        short = found["model_short"].group(1) if found["model_short"] else mid.split("/")[-1]
        tp = found["tensor_parallelism"].group(1) if found["tensor_parallelism"] else "?"
        out[req.parent.name] = {"model": short, "model_id": mid, "tp": tp}
    return out


def group_infos(scope: str, groups: list[str], names: dict[str, dict[str, Any]]) -> dict:
    """:class:`GroupInfo` per group from the experiments' model names."""
    from evolve.export.go.writer import GroupInfo

    out = {}
    for g in groups:
        if scope == "per_scenario":
            runs = {g: names[g]} if g in names else {}
        else:
            runs = {n: v for n, v in names.items() if v["model"] == g}
        aliases = {g.lower()} | {v["model_id"].lower() for v in runs.values()}
        note = ("fitted on " + ", ".join(f"{n} (tp {v['tp']})" for n, v in sorted(runs.items()))
                if runs else "")
        out[g] = GroupInfo(tuple(sorted(aliases)), note)
    return out


def from_file(opts: ExportOptions) -> Source:
    """A program file: (program, constants, scope, header lines, stored config, the loop
    the constants were fitted in; None for the declared values)."""
    from evolve.program.language import parse_program
    from evolve.workflows.targets import no_run_for_file, read_constants

    no_run_for_file(opts.run, opts.id)
    if opts.fitted_loop is not None and not opts.constants:
        raise UserError("--fitted-loop: says where --constants were fitted; without "
                        "--constants the program's declared values are exported")
    try:
        prog = parse_program(Path(opts.id).read_bytes())
    except ProgramError as exc:
        raise UserError(f"{opts.id}: {exc}") from None
    if opts.constants:
        consts = read_constants(opts.constants, prog, inline=True)
        meta: dict[str, Any] = {"Constants": "from --constants"}
    else:
        consts = {"global": {s.name: s.init for s in prog.constants}}
        meta = {"Constants": "the program's initial values (not fitted)"}
    scope = opts.scope or ("global" if list(consts) == ["global"] else
                           "pooled" if "global" in consts else "per_model")
    meta["Source file"] = Path(opts.id).name
    fitted = (opts.fitted_loop or "vllm") if opts.constants else None
    return prog, consts, scope, meta, None, fitted


_MODES = {"closed_loop_slice": "closed loop", "closed_loop": "closed loop",
          "teacher_forced": "teacher forced", "lomo_teacher_forced": "teacher forced"}


def _summary(metrics: dict[str, Any] | None) -> dict[str, str]:
    """Mean APE of E2E and TTFT per split, as header lines, saying how they were scored
    (the stored ``mode``; metrics stored before it existed were teacher forced)."""
    out: dict[str, str] = {}
    by: dict[str, list[tuple[float, float, str]]] = {}
    for m in (metrics or {}).values():
        ape = m.get("ape") or {}
        if ape.get("e2e_mean") is not None and ape.get("ttft_mean") is not None:
            by.setdefault(m.get("split", "?"), []).append(
                (ape["e2e_mean"], ape["ttft_mean"], str(m.get("mode", "teacher_forced"))))
    for split, vals in sorted(by.items()):
        e2e = sum(v[0] for v in vals) / len(vals)
        ttft = sum(v[1] for v in vals) / len(vals)
        modes = {v[2] for v in vals}
        what = ("stage slices" if modes == {"closed_loop_slice"} else
                "runs" if "closed_loop_slice" not in modes else "runs and slices")
        how = " and ".join(sorted({_MODES.get(x, x) for x in modes}))
        out[f"Scores ({split}, {len(vals)} {what}, {how})"] = (
            f"mean APE E2E {100 * e2e:.2f} %, TTFT {100 * ttft:.2f} %")
    return out


def from_archive(opts: ExportOptions) -> Source:
    """An archived program: its latest accepted constants, the run's config and loop."""
    from evolve.archive import Archive
    from evolve.workflows.targets import parse_stored

    for flag, value in (("--constants", opts.constants), ("--scope", opts.scope),
                        ("--fitted-loop", opts.fitted_loop)):
        if value is not None:
            raise UserError(f"{flag}: applies to a program file; {opts.id} is read from the "
                            "archive with its own fitted constants and scope")

    with Archive(opts.archive, create=False) as archive:
        pid = archive.resolve_id(opts.id, opts.run)
        rows = archive.program(pid, opts.run)
        if not rows:
            raise ArchiveError(f"{opts.archive}: program {pid[:12]} is not in run {opts.run}")
        row = rows[-1]
        run = archive.run(row.run_id)
        accepted = archive.evaluations(row.run_id, program_id=pid, status="accepted")
        if not accepted:
            raise ArchiveError(f"{opts.archive}: program {pid[:12]} has no accepted "
                               f"evaluation in run {row.run_id} (nothing fitted to export)")
        ev = accepted[-1]
    prog = parse_stored(row.source, pid, f"archive {opts.archive}")
    scope = str((run.config or {}).get("fit", {}).get("scope", "global"))
    meta: dict[str, Any] = {
        "Archive": f"{Path(opts.archive).name}, run {row.run_id} (seed {run.seed}), "
                   f"generation {row.generation}, operator {row.operator}",
        "Constants": f"{ev.kind} evaluation of generation {ev.generation}, corpus "
                     f"{ev.corpus_version}",
        "Train loss": ev.loss, "Complexity": ev.complexity,
        **_summary(ev.metrics)}
    stored = dict(run.config or {})
    fitted = str((stored.get("run") or {}).get("loop", "vllm"))
    return prog, dict(ev.constants or {}), scope, meta, stored, fitted


def _select(consts: dict, infos: dict, name: str) -> dict:
    """The constant groups ``--model NAME`` names (by group name, else by alias)."""
    key = name.lower()
    keep = {g: v for g, v in consts.items() if g.lower() == key}
    if not keep:
        keep = {g: v for g, v in consts.items()
                if key in infos[g].aliases or key in {a.rsplit("/", 1)[-1]
                                                      for a in infos[g].aliases}}
    if not keep:
        raise UserError(f"--model {name}: no constant group matches (groups: "
                        f"{', '.join(sorted(consts))})")
    return keep


def _kernels(prog: Any, data: str | None, infos: dict, say: Say) -> dict:
    """Measured kernel curves per model, for a program that reads a ``k_*`` feature (they
    are embedded in the Go file); empty when it reads none or the data has no tables."""
    from evaluator.api import DataError, load_scenarios
    from evolve.export.go.writer import kernels_from_scenarios

    if not any(r.startswith("k_") for r in prog.features_read):
        return {}
    try:
        found = kernels_from_scenarios(load_scenarios(data))
    except DataError:
        found = {}
    if not found:
        say("warning: the program reads measured-kernel features (k_*) but the data "
            "directory has no kernel tables; the Go file uses the roofline fallback")
    return {m: ((*aliases, *(infos[m].aliases if m in infos else ())), block)
            for m, (aliases, block) in found.items()}


def _require_runs_to_refit(opts: ExportOptions, chosen: list[str], scope: str,
                           fitted: str | None) -> None:
    """A refit prices each exported group on its measured runs: a data directory without a
    group's runs is refused before the refit, naming the groups and the ways out."""
    from evaluator.api import DataError

    if opts.no_refit or fitted is None or fitted == opts.loop:
        return
    try:
        names = model_names(opts.data)
    except DataError:
        return  # _for_loop says what is wrong with the data directory
    have = ({n for n in names} if scope == "per_scenario"
            else {v["model"].lower() for v in names.values()})
    missing = [g for g in chosen if g != "global" and g.lower() not in have]
    if missing and names:
        raise UserError(f"{opts.data or 'the data directory'}: no measured run of "
                        f"{', '.join(missing)}, whose constants the refit for {opts.loop}'s "
                        "engine loop needs; pass a data directory with them, --model NAME "
                        "for the others, or --no-refit")


def _for_loop(opts: ExportOptions, prog: Any, consts: dict, scope: str,
              stored: dict[str, Any] | None, fitted: str | None, say: Say) -> Any:
    """The constants for ``opts.loop`` and their accuracy there; None without data when
    nothing needs refitting (an export then works offline, as before)."""
    from evaluator.api import DataError, data_dir
    from evolve.workflows.for_loop import fitting_config, for_loop

    if opts.no_refit:
        return None
    needs_refit = fitted is not None and fitted != opts.loop
    try:
        data_dir(opts.data)
    except DataError as exc:
        if needs_refit or opts.data is not None:
            raise UserError(f"{exc}; constants fitted in {fitted}'s engine loop are refitted "
                            f"for {opts.loop}'s against the measured runs (or pass "
                            "--no-refit)") from None
        return None
    say(f"{'refitting constants for' if needs_refit else 'scoring in'} {opts.loop}'s "
        "engine loop (closed loop, every measured run)...")
    cfg = fitting_config(stored)
    return for_loop(prog, consts, scope, fitted, opts.loop, cfg, opts.data,
                    refit=not opts.no_refit, evals=opts.refit_evals,
                    log=lambda m: say(f"  {m}"))


def accuracy_lines(exp: Any, async_steps: bool = False) -> list[str]:
    """The per-run table of the accuracy to expect in the target loop, as lines (the Go
    header's notes). With ``async_steps`` that is vLLM's loop, which the model carries
    into stock BLIS (docs/blis.md gives how close BLIS comes to it)."""
    from evolve.workflows.for_loop import ACCURACY_HEADERS, accuracy_rows

    where = (f"{LOOP_NAMES[exp.loop]}, which this model carries into BLIS" if async_steps
             else LOOP_NAMES[exp.loop])
    head = (f"Expected accuracy in {where} (evolve's replica, closed loop, "
            "against the measured runs; err = simulated / measured - 1; times in s):")
    return [head, *table(ACCURACY_HEADERS, accuracy_rows(exp), right=range(2, 8)).splitlines()]
