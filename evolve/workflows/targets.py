"""What a command acts on: a program and its constants, from the archive or from a file.

Why a module of its own: ``validate``, ``generalize`` (and future commands) take the same
``PROGRAM [--archive A] [--run N] [--constants JSON]`` arguments; commands never import
each other, so the shared reading lives here.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any, TypedDict

from evolve.assets import asset_dir
from evolve.errors import UserError
from evolve.program.language import Program

SEEDS_DIR = asset_dir("seeds")


def add_simulator_flags(parser: argparse.ArgumentParser) -> None:
    """The simulator switches every command that simulates the measured runs takes."""
    parser.add_argument("--no-prompt-cache", action="store_true",
                        help="cache only the shared system prompts, not whole repeated "
                             "prompts as vLLM does (evaluator/data/prompt_cache.py)")
    parser.add_argument("--no-async-scheduling", action="store_true",
                        help="form each step when the previous one ends, not as it begins "
                             "(vLLM's async scheduling, the default; evaluator/sim/simulator.py)")
    parser.add_argument("--loop", choices=("vllm", "blis"),
                        help="engine loop to simulate: vllm (v0.15.1, where the runs were "
                             "measured) or blis (BLIS at the pinned commit, where an exported "
                             "model runs; docs/blis.md). Default: the archived run's, else "
                             "vllm")


class SimulatorOptions(TypedDict):
    prompt_cache: bool
    async_scheduling: bool
    loop: str


def simulator_options(args: argparse.Namespace, loop: str | None = None) -> SimulatorOptions:
    """``add_simulator_flags``' values as the loader's keyword arguments; ``loop``: the
    engine loop when ``--loop`` is not given (an archived run's), else vllm."""
    return {"prompt_cache": not args.no_prompt_cache,
            "async_scheduling": not args.no_async_scheduling,
            "loop": getattr(args, "loop", None) or loop or "vllm"}


def on_all_cores(ev: Any) -> Any:
    """``ev`` (an ``evaluator.api.Evaluator``) simulating as many runs at once as this
    machine has CPUs, in threads: a command simulates while nothing else of its own runs
    (validate: 16 runs; generalize and fit --closed-loop: a closed-loop fit per fold). The
    results do not depend on it."""
    from evolve.config.schema import cpu_count

    ev.threads = max(1, cpu_count())
    return ev


def available_seeds() -> list[str]:
    """Names of the project's seed programs (``seeds/*.py`` stems)."""
    return sorted(p.stem for p in SEEDS_DIR.glob("*.py"))


def seed_path(spec: str) -> Path | None:
    """The seed file a bare name means (``transfer`` -> seeds/transfer.py), or None. Hex
    strings are left to the archive: they are program-id prefixes."""
    if re.fullmatch(r"[0-9a-fA-F]+", spec) or "/" in spec or spec.endswith(".py"):
        return None
    path = SEEDS_DIR / f"{spec}.py"
    return path if path.is_file() else None


def program_file(spec: str) -> Path | None:
    """The program file ``spec`` names: itself if it is a file, else the seed of that name
    (``layered`` -> seeds/layered.py), else None (an archive id, or nothing)."""
    path = Path(spec)
    return path if path.is_file() else seed_path(spec)


RULE = "layered"  # docs/selection.md: the program built for a model nobody measured


def rule_program() -> Program:
    """The `layered` seed: the reference a program is calibrated to for a model nobody
    measured (docs/selection.md)."""
    from evolve.program.language import parse_program

    path = seed_path(RULE)
    if path is None:  # the seeds ship with the package
        raise UserError(f"{SEEDS_DIR}: the {RULE} seed is missing (a broken install)")
    return parse_program(path.read_bytes())


def check_id_spec(spec: str, archive: str) -> None:
    """A name that is no file and no seed must be an id prefix (hex) to look up in the
    archive; say all three choices rather than "ids are hex" alone."""
    if not re.fullmatch(r"[0-9a-fA-F]{1,64}", spec.strip()):
        raise UserError(f"{spec}: not a program file, a seed name "
                        f"({', '.join(available_seeds())}) or a program id in {archive}")


def parse_stored(source: str, program_id: str, where: str) -> Program:
    """An archived program's stored source, checked again: a source that does not hash to
    its id (the archive was edited: it must not be exported, validated or replayed as that
    program) or no longer passes the checker (the language changed) is one line naming
    the program, never a raw rejection."""
    from evolve.archive.ids import check_source
    from evolve.errors import ProgramError
    from evolve.program.language import parse_program

    check_source(program_id, source, where)
    try:
        return parse_program(source)
    except ProgramError as exc:
        raise UserError(f"{where}: stored program {program_id[:12]} no longer passes the "
                        f"checker ({exc})") from None


def check_flags(args: argparse.Namespace, *, at_least: dict[str, int] | None = None,
                nonnegative: tuple[str, ...] = ()) -> None:
    """One flag at a time, named with its value: ``at_least`` maps an integer flag's
    attribute to its minimum; ``nonnegative`` names float flags that must be finite and
    >= 0 (a combined message once left the user to guess which flag was wrong)."""
    for attr, low in (at_least or {}).items():
        val = getattr(args, attr)
        if val < low:
            raise UserError(f"--{attr.replace('_', '-')} {val}: must be an integer >= {low}")
    for attr in nonnegative:
        val = getattr(args, attr)
        if not (math.isfinite(val) and val >= 0):
            raise UserError(f"--{attr.replace('_', '-')} {val}: must be a finite number >= 0")


def seed_arg(text: str) -> int:
    """argparse type of a fitting ``--seed``: an integer in [0, 2^63), the range `evolve run`
    takes (an archive stores a seed as a 64-bit integer), so a seed that fits one command
    fits every other; -1 was once taken by fit, generalize and calibrate alone."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: not an integer") from None
    from evolve.config.schema import SEED_LIMIT

    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"{value}: must be an integer in [0, 2^63)")
    return value


def no_run_for_file(run: int | None, spec: str) -> None:
    """``--run N`` names an archive run; with a program file or seed it was ignored without
    a word (validate, export-go, generalize, calibrate), so it is refused."""
    if run is not None:
        raise UserError(f"--run: applies to a program in the archive; {spec} is a program "
                        "file or seed (its constants: --constants)")


def not_blank(value: str | None, flag: str, what: str) -> None:
    """A flag given as "" or spaces (a shell variable left unset) is refused, naming what it
    should name: taken as absent, it once meant the default without a word."""
    if value is not None and not value.strip():
        raise UserError(f"{flag}: blank; name {what}")


def output_file(path: str | Path, flag: str) -> Path:
    """Check, before any work, that a file can be written at ``path``.

    Why it opens the file rather than asking ``os.access``: for root, ``access`` says yes
    to paths no one can write (``/proc``, a read-only mount), and the user would learn of
    it after the work, from a traceback. A file the probe created is removed again.
    """
    out = Path(path)
    if out.is_dir():
        raise UserError(f"{flag} {out}: is a directory")
    if not out.parent.is_dir():
        what = "is not a directory" if out.parent.exists() else "does not exist"
        raise UserError(f"{flag} {out}: {out.parent} {what}")
    existed = out.exists()
    try:
        with open(out, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UserError(f"{flag} {out}: not writable ({exc.strerror})") from None
    if not existed:
        out.unlink()
    return out


def write_file(path: str | Path, text: str, flag: str) -> None:
    """Write ``text`` to a file ``output_file`` checked; a disk that fills up meanwhile is
    one line naming the flag, not a traceback."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot write ({exc.strerror})") from None


def output_dir(path: str | Path, flag: str) -> Path:
    """Create (if needed) and check, before any work, a directory to write files into
    (by writing a temporary file there: see ``output_file``)."""
    import tempfile

    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except FileExistsError:
        raise UserError(f"{flag} {out}: exists and is not a directory") from None
    except OSError as exc:
        raise UserError(f"{flag} {out}: cannot write there ({exc.strerror})") from None
    return out


def infer_scope(groups: dict[str, Any], scenarios: Any) -> str:
    """The constant scope a set of fitted groups implies (global / per_model / pooled /
    per_scenario), read from the groups that name something in the data.

    Pooled groups are the models' sets plus a ``global`` one (what a model without
    measurements gets); reading them as per-scenario would hand every run the global set.
    A set fitted on other data (an archive made on the bundled runs, validated on a user's
    own) names models this data lacks: those groups are ignored, not a reason to fall back.
    """
    keys = set(groups)
    models = {s.model for s in scenarios}
    runs = {s.name for s in scenarios}
    if keys == {"global"}:
        return "global"
    if "global" in keys:
        return "pooled"
    if keys & runs and not keys & models:
        return "per_scenario"
    return "per_model"


def unmatched_runs(groups: dict[str, Any], scenarios: Any, scope: str) -> list[str]:
    """Runs that get no fitted set of their own nor a ``global`` one under ``scope``: they
    are simulated at the program's declared values, which the caller must say."""
    from evolve.fitting import group_key

    if "global" in groups:
        return []
    return sorted(s.name for s in scenarios if group_key(s, scope) not in groups)


def read_constants(spec: str, program: Program, flag: str = "--constants",
                   inline: bool = False) -> dict[str, dict[str, float]]:
    """Constant groups from a JSON file (or, with ``inline``, JSON text given on the
    command line, which starts with ``{``): ``{group: {name:
    number}}``, or ``{name: number}`` for one global set. Every group must give every
    constant of ``program`` a finite number; anything else is one line naming the file,
    the group and the constant, never a traceback deep in a simulation."""
    import math

    # JSON text starts with a bracket or quote; a file name almost never does
    is_text = inline and spec.lstrip()[:1] in ("{", "[", '"')
    where = flag if is_text else f"{flag} {spec}"
    try:
        raw = json.loads(spec if is_text else Path(spec).read_text(encoding="utf-8-sig"))
    except OSError as exc:
        raise UserError(f"{where}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise UserError(f"{where}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not JSON ({exc})") from None
    except (ValueError, RecursionError, OverflowError) as exc:  # past the parser's limits
        from evaluator.api import limit_problem

        text = spec if is_text else Path(spec).read_text(encoding="utf-8-sig")
        raise UserError(f"{where}: {limit_problem(exc, text)}") from None
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"{where}: expected a JSON object {{group: {{name: number}}}} "
                        "or {name: number}")
    if "global" not in raw and all(not isinstance(v, dict) for v in raw.values()):
        raw = {"global": raw}
    names = program.const_names
    out: dict[str, dict[str, float]] = {}
    for group, vals in raw.items():
        if not isinstance(vals, dict):
            raise UserError(f"{where}: group {group!r} is not an object {{name: number}}")
        unknown = sorted(set(vals) - set(names))
        if unknown:
            raise UserError(f"{where}: group {group!r}: {unknown[0]!r} is not a constant of "
                            f"the program ({', '.join(names)})")
        out[group] = {}
        for name in names:
            if name not in vals:
                raise UserError(f"{where}: group {group!r} lacks constant {name!r}")
            v = vals[name]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise UserError(f"{where}: group {group!r}: {name} = {v!r} is not a finite "
                                "number")
            out[group][name] = float(v)
    return out


def scope_of(args: Any, groups: dict[str, Any], scenarios: Any, default: str) -> str:
    """The scope a command simulates ``groups`` in (``args``: its flags or a workflow's
    options, with ``scope`` and ``constants``; ``--scope``, else inferred, else
    ``default``), after refusing a constants file that names nothing in the data and
    saying which runs get no fitted constants."""
    import sys

    if getattr(args, "constants", None):
        check_groups(groups, scenarios, f"--constants {args.constants}")
    scope = args.scope or (infer_scope(groups, scenarios) if groups else default)
    left = unmatched_runs(groups, scenarios, scope) if groups else []
    if left:  # group names come from an archive or a file: shown, never sent raw
        from evolve.text.untrusted import printable

        print(printable(f"note: no fitted constants for {', '.join(left)} (scope {scope}; "
                        f"groups {', '.join(sorted(groups))}): simulated at the program's "
                        "declared values"), file=sys.stderr)
    return scope


def note_roofline_kernels(program: Program, scenarios: Any) -> None:
    """Say so when ``program`` reads measured-kernel features (``k_*``) on runs whose data
    directory has no kernel tables: those features are then the roofline fallback
    (docs/kernels.md), so the scores differ from the same runs with the tables."""
    import sys

    if not any(n.startswith("k_") for n in program.features_read):
        return
    bare = sorted({s.model for s in scenarios
                   if not (len(s.kernels) and float(s.kernels[0]) > 0)})
    if bare:
        print(f"note: the program reads measured-kernel features (k_*) and the data has no "
              f"kernel tables for {', '.join(bare)}: they are the roofline fallback there "
              "(put kernels/bench_data in the data directory: docs/kernels.md)",
              file=sys.stderr)


def check_groups(groups: dict[str, Any], scenarios: Any, where: str) -> None:
    """A constants file whose groups name nothing in the data (a typo such as ``Global``)
    would leave every run at the declared values: one line naming the groups instead."""
    known = {"global"} | {s.model for s in scenarios} | {s.name for s in scenarios}
    if groups and not set(groups) & known:
        raise UserError(f"{where}: no group names a model or run of the data directory "
                        f"or is 'global' (groups: {', '.join(sorted(groups))})")


def load_target(args: argparse.Namespace) -> tuple[Program, dict[str, Any], str]:
    """(program, constant groups, label) from a file, a seed name or the archive."""
    program, groups, label, _loop = load_fitted(args)
    return program, groups, label


def load_fitted(args: argparse.Namespace
                ) -> tuple[Program, dict[str, Any], str, str | None]:
    """:func:`load_target` and the engine loop its constants were fitted in: the archived
    run's ``run.loop`` (vllm for runs stored before the key), None for a program file."""
    from evolve.errors import ProgramError
    from evolve.program.language import parse_program

    path = program_file(args.program) or Path(args.program)
    if path.suffix == ".py" or path.exists():
        try:
            program = parse_program(path.read_bytes())
        except OSError as exc:
            raise UserError(f"{path}: cannot read ({exc.strerror})") from None
        except ProgramError as exc:
            raise UserError(f"{path}: {exc}") from None
        no_run_for_file(getattr(args, "run", None), args.program)
        groups = read_constants(args.constants, program) if args.constants else {}
        return program, groups, path.stem, None
    from evolve.archive.store import Archive

    if getattr(args, "constants", None):
        raise UserError(f"--constants: applies to a program file; {args.program} is read "
                        "from the archive with its own fitted constants")
    check_id_spec(args.program, args.archive)
    with Archive(args.archive, create=False) as ar:  # its errors: missing, empty, foreign
        pid = ar.resolve_id(args.program, getattr(args, "run", None))
        evals = [e for e in ar.evaluations_of(pid) if e.status == "accepted" and e.constants
                 and (args.run is None or e.run_id == args.run)]
        if not evals:
            raise UserError(f"{args.archive}: program {pid[:12]} has no accepted evaluation")
        rows = ar.program(pid, evals[-1].run_id)
        loop = str(((ar.run(evals[-1].run_id).config or {}).get("run") or {}).get(
            "loop", "vllm"))
        program = parse_stored(rows[0].source, pid, f"archive {args.archive}")
        return program, evals[-1].constants, pid[:12], loop


def fitted_run_setting(args: argparse.Namespace, section: str, key: str, before: Any) -> Any:
    """A setting of the run whose constants :func:`load_fitted` read (``before``: the value a
    run stored before the key existed), or None for a program file: so ``validate``
    simulates a pick as its run fitted it (e.g. ``run.step_noise``)."""
    path = program_file(args.program) or Path(args.program)
    if path.suffix == ".py" or path.exists():
        return None
    from evolve.archive.store import Archive

    with Archive(args.archive, create=False) as ar:
        pid = ar.resolve_id(args.program, getattr(args, "run", None))
        runs = [e.run_id for e in ar.evaluations_of(pid) if e.status == "accepted"
                and e.constants and (args.run is None or e.run_id == args.run)]
        config = (ar.run(runs[-1]).config or {}) if runs else {}
    return (config.get(section) or {}).get(key, before)
