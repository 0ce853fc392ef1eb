"""``evolve export-go ID``: write an archived program as a BLIS ``LatencyModel`` Go file.

Two sources: an archive (``ID`` is a program id or unique prefix; the constants, scope and
scores come from its latest accepted evaluation in the chosen run), or a program file
(``ID`` is a path; constants from ``--constants``, else the program's initial values), so
the command also works without an archive. The model names BLIS may pass (``hw.Model``)
are read from the data directory's ``requests.json`` files when it is available.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

HELP = "translate a program to a BLIS Go model"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", metavar="ID",
                        help="program id (or unique prefix) in the archive, a program file "
                        "or a seed name (e.g. layered)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    parser.add_argument("--archive", default="archive.db", metavar="F", help="archive file")
    parser.add_argument("--run", type=int, metavar="N",
                        help="archive run to take constants from (default: latest with ID)")
    parser.add_argument("--model", metavar="NAME",
                        help="export only this constant group (a model, or a scenario for "
                             "per_scenario scope); matched on group names and model ids")
    parser.add_argument("--constants", metavar="JSON",
                        help="program-file mode: {group: {name: value}} or {name: value} "
                             "(global), as JSON text or a .json file")
    parser.add_argument("--scope", choices=("global", "per_model", "pooled", "per_scenario"),
                        help="program-file mode: the constants' scope (default: global for "
                             "one group named 'global', pooled for model groups plus "
                             "'global', else per_model)")
    parser.add_argument("--alias", action="append", default=[], metavar="GROUP=NAME",
                        help="another model name (BLIS hw.Model) for a constant group; "
                             "repeatable")
    parser.add_argument("--data", metavar="DIR",
                        help="data directory for model names, the refit and the accuracy "
                             "table (default: $EVOLVE_DATA or ../shared/data; without data "
                             "only --no-refit exports)")
    parser.add_argument("--loop", choices=("blis", "vllm"), default="blis",
                        help="engine loop the Go model will run in: blis (BLIS at the pinned "
                             "commit, the default) or vllm (a BLIS with vLLM's async "
                             "scheduling); constants fitted in the other loop are refitted")
    parser.add_argument("--no-refit", action="store_true",
                        help="export the constants as they are, with no refit and no "
                             "accuracy table (offline; for constants fitted in --loop's loop)")
    parser.add_argument("--fitted-loop", choices=("vllm", "blis"),
                        help="program-file mode: the loop --constants were fitted in "
                             "(default: vllm, `evolve fit`'s default)")
    parser.add_argument("--save-constants", metavar="FILE",
                        help="also write the exported constants as JSON {group: {name: "
                             "value}} (what `evolve validate FILE --constants` reads)")
    parser.add_argument("--refit-evals", type=int, metavar="N",
                        help="closed-loop simulations per constant group in the refit "
                             "(default: the run's fit.polish_evals, 150)")


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


Source = tuple[Any, dict, str, dict[str, Any], dict[str, Any] | None, str | None]


def _from_file(args: argparse.Namespace) -> Source:
    """A program file: (program, constants, scope, header lines, stored config, the loop
    the constants were fitted in; None for the declared values)."""
    from evolve.errors import ProgramError, UserError
    from evolve.program.language import parse_program
    from evolve.workflows.targets import no_run_for_file, read_constants

    no_run_for_file(args.run, args.id)
    if args.fitted_loop is not None and not args.constants:
        raise UserError("--fitted-loop: says where --constants were fitted; without "
                        "--constants the program's declared values are exported")
    try:
        prog = parse_program(Path(args.id).read_bytes())
    except ProgramError as exc:
        raise UserError(f"{args.id}: {exc}") from None
    if args.constants:
        consts = read_constants(args.constants, prog, inline=True)
        meta: dict[str, Any] = {"Constants": "from --constants"}
    else:
        consts = {"global": {s.name: s.init for s in prog.constants}}
        meta = {"Constants": "the program's initial values (not fitted)"}
    scope = args.scope or ("global" if list(consts) == ["global"] else
                           "pooled" if "global" in consts else "per_model")
    meta["Source file"] = Path(args.id).name
    fitted = (args.fitted_loop or "vllm") if args.constants else None
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


def _from_archive(args: argparse.Namespace) -> Source:
    """An archived program: its latest accepted constants, the run's config and loop."""
    from evolve.archive import Archive
    from evolve.errors import ArchiveError, UserError
    from evolve.workflows.targets import parse_stored

    for flag, value in (("--constants", args.constants), ("--scope", args.scope),
                        ("--fitted-loop", args.fitted_loop)):
        if value is not None:
            raise UserError(f"{flag}: applies to a program file; {args.id} is read from the "
                            "archive with its own fitted constants and scope")

    with Archive(args.archive, create=False) as archive:
        pid = archive.resolve_id(args.id, args.run)
        rows = archive.program(pid, args.run)
        if not rows:
            raise ArchiveError(f"{args.archive}: program {pid[:12]} is not in run {args.run}")
        row = rows[-1]
        run = archive.run(row.run_id)
        accepted = archive.evaluations(row.run_id, program_id=pid, status="accepted")
        if not accepted:
            raise ArchiveError(f"{args.archive}: program {pid[:12]} has no accepted "
                               f"evaluation in run {row.run_id} (nothing fitted to export)")
        ev = accepted[-1]
    prog = parse_stored(row.source, pid, f"archive {args.archive}")
    scope = str((run.config or {}).get("fit", {}).get("scope", "global"))
    meta: dict[str, Any] = {
        "Archive": f"{Path(args.archive).name}, run {row.run_id} (seed {run.seed}), "
                   f"generation {row.generation}, operator {row.operator}",
        "Constants": f"{ev.kind} evaluation of generation {ev.generation}, corpus "
                     f"{ev.corpus_version}",
        "Train loss": ev.loss, "Complexity": ev.complexity,
        **_summary(ev.metrics)}
    stored = dict(run.config or {})
    fitted = str((stored.get("run") or {}).get("loop", "vllm"))
    return prog, dict(ev.constants or {}), scope, meta, stored, fitted


def _select(consts: dict, scope: str, infos: dict, name: str) -> dict:
    from evolve.errors import UserError

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


def _kernels(prog: Any, data: str | None, infos: dict) -> dict:
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
        print("warning: the program reads measured-kernel features (k_*) but the data "
              "directory has no kernel tables; the Go file uses the roofline fallback",
              file=sys.stderr)
    return {m: ((*aliases, *(infos[m].aliases if m in infos else ())), block)
            for m, (aliases, block) in found.items()}


def run(args: argparse.Namespace) -> int:
    from evolve.errors import ExportError, UserError
    from evolve.export.go.writer import export_go
    from evolve.workflows.targets import check_id_spec, output_file, program_file, write_file

    if args.output:  # an unwritable path is found now, not after the work
        output_file(args.output, "-o")
    if args.save_constants:
        output_file(args.save_constants, "--save-constants")
    path = program_file(args.id)  # a file, or a seed name (as fit, validate, generalize)
    if path is not None:
        args.id = str(path)
    else:
        check_id_spec(args.id, args.archive)
    if args.refit_evals is not None and args.refit_evals < 0:
        raise UserError(f"--refit-evals {args.refit_evals}: must be an integer >= 0")
    from evolve.text.words import LOOP_NAMES

    source = _from_file if path is not None else _from_archive
    prog, consts, scope, meta, stored, fitted = source(args)
    infos = group_infos(scope, sorted(consts), model_names(args.data))
    for item in args.alias:  # every flag checked before the refit's minutes of work
        group, sep, name = item.partition("=")
        if not sep or group not in infos or not name:
            raise UserError(f"--alias {item}: expected GROUP=NAME with GROUP one of "
                            f"{', '.join(sorted(infos))}")
        infos[group] = replace(infos[group], aliases=(*infos[group].aliases, name.lower()))
    chosen = sorted(_select(consts, scope, infos, args.model)) if args.model else sorted(consts)
    if scope == "per_scenario" and len(chosen) > 1:
        raise UserError("per_scenario constants: pick one scenario with --model NAME "
                        f"({', '.join(sorted(consts))})")
    exp = _for_loop(args, prog, consts, scope, stored, fitted)
    notes: list[str] = []
    if exp is not None:
        consts = exp.groups
        meta["Engine loop"] = f"{exp.loop}: {exp.note}"
        notes = _accuracy(exp)
        print(f"constants: {exp.note}", file=sys.stderr)
        print("\n".join(notes), file=sys.stderr)
    else:
        meta["Engine loop"] = (f"{args.loop}: constants "
                               + (f"fitted in {LOOP_NAMES[fitted]}" if fitted else
                                  "declared by the program, not fitted")
                               + (", exported as they are (--no-refit)" if args.no_refit else
                                  "; no data directory to check them"))
    consts = {g: consts[g] for g in chosen}
    kernels = _kernels(prog, args.data, infos)
    try:
        text = export_go(prog, consts, scope, infos, meta, kernels, notes)
    except ExportError as exc:
        raise UserError(f"{args.id}: {exc}") from None
    if args.save_constants:
        write_file(args.save_constants, json.dumps(consts, indent=1, sort_keys=True) + "\n",
                   "--save-constants")
    if args.output:
        write_file(args.output, text, "-o")
        print(f"wrote {args.output} ({prog.id[:12]}, {scope}: {', '.join(sorted(consts))})",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    if scope == "pooled" and "global" in consts:
        print("note: any other model gets the pooled global set, which a frontier pick is "
              "not chosen for; for a model nobody measured export the `layered` rule "
              "(docs/selection.md, 'A model nobody measured')", file=sys.stderr)
    return 0


def _for_loop(args: argparse.Namespace, prog: Any, consts: dict, scope: str,
              stored: dict[str, Any] | None, fitted: str | None) -> Any:
    """The constants for ``--loop`` and their accuracy there; None without data when
    nothing needs refitting (an export then works offline, as before)."""
    from evaluator.api import DataError, data_dir
    from evolve.errors import UserError
    from evolve.workflows.for_loop import fitting_config, for_loop

    if args.no_refit:
        return None
    needs_refit = fitted is not None and fitted != args.loop
    try:
        data_dir(args.data)
    except DataError as exc:
        if needs_refit or args.data is not None:
            raise UserError(f"{exc}; constants fitted in {fitted}'s engine loop are refitted "
                            f"for {args.loop}'s against the measured runs (or pass "
                            "--no-refit)") from None
        return None
    print(f"{'refitting constants for' if needs_refit else 'scoring in'} {args.loop}'s "
          "engine loop (closed loop, every measured run)...", file=sys.stderr)
    cfg = fitting_config(stored)
    return for_loop(prog, consts, scope, fitted, args.loop, cfg, args.data,
                    refit=not args.no_refit, evals=args.refit_evals,
                    log=lambda m: print(f"  {m}", file=sys.stderr))


def _accuracy(exp: Any) -> list[str]:
    """The per-run table of the accuracy to expect in the target loop, as lines."""
    from evolve.cli.output import table
    from evolve.text.words import LOOP_NAMES
    from evolve.workflows.for_loop import ACCURACY_HEADERS, accuracy_rows

    head = (f"Expected accuracy in {LOOP_NAMES[exp.loop]} (evolve's replica, closed loop, "
            "against the measured runs; err = simulated / measured - 1; times in s):")
    return [head, *table(ACCURACY_HEADERS, accuracy_rows(exp), right=range(2, 8)).splitlines()]
