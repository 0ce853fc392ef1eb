"""The ``evolve`` command line: one sub-command per module in ``evolve.cli.commands``.

Each command module exposes ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Modules are imported only when their command runs, so ``evolve
--help`` stays fast.

Errors are handled here, once, for every command (so a new command cannot forget it):

* expected errors (:func:`expected_error`: ``evolve.errors``: bad config, unknown ids,
  rejected programs, archive problems; ``evaluator.api.DataError``: bad data; a database
  that refuses an operation or is corrupt, named) are one line, exit code 2;
* anything else is a bug: one line naming the file the full traceback was written to,
  exit code 1 (a user should never have to read a traceback, but a maintainer needs one);
* a reader that leaves early (``| head``) ends quietly (141); Ctrl-C outside a run is 130,
  also when it lands inside compiled code (numba reports it as a ``SystemError``);
* every line printed here and every traceback file has the secrets of its URLs masked
  (``evolve.text.untrusted.mask_secrets``: a database or endpoint URL's password, in any form)
  and its control characters shown escaped (a message may quote a value from an archive
  or a data file; a terminal must not obey it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import importlib
import os
import sys
import tempfile
import traceback
import types
from typing import NoReturn

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, one-line help)
    "run": ("evolve.cli.commands.run", "run the evolutionary search"),
    "fit": ("evolve.cli.commands.fit", "fit a program's constants and print its per-run table"),
    "frontier": ("evolve.cli.commands.frontier", "show the Pareto frontier of a run"),
    "show": ("evolve.cli.commands.show", "show one program: source, constants, scores, lineage"),
    "replay": ("evolve.cli.commands.replay", "re-score an archived program; non-zero on mismatch"),
    "runs": ("evolve.cli.commands.runs", "list the runs in the archive"),
    "validate": ("evolve.cli.commands.validate", "closed-loop validation against measured runs"),
    "baselines": ("evolve.cli.commands.baselines", "closed-loop scores of the published models"),
    "generalize": ("evolve.cli.commands.generalize",
                   "leave-one-model/workload-out: fit on the rest, validate held out"),
    "calibrate": ("evolve.cli.commands.calibrate",
                  "constants for a model nobody measured, calibrated to the layered rule"),
    "export-go": ("evolve.cli.commands.export_go",
                  "translate a program to a BLIS Go model that carries vLLM's engine loop"),
    "llm-check": ("evolve.cli.commands.llm_check", "send one tiny request to an LLM endpoint"),
    "report": ("evolve.cli.commands.report", "write a static HTML report of a run"),
    "study": ("evolve.cli.commands.study",
              "independent runs (seeds in parallel) and the median [min, max] of their picks"),
    "ingest": ("evolve.cli.commands.ingest", "turn a measured run into an experiment directory"),
    "data": ("evolve.cli.commands.data", "list the experiments in a data directory"),
    "export-trace": ("evolve.cli.commands.export_trace",
                     "write an experiment as a BLIS TraceV2 pair"),
}

# `evolve --help` lists the commands in these groups, in the order a user meets them.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("search", ("run", "study", "fit")),
    ("inspect", ("frontier", "show", "runs", "validate", "generalize", "baselines", "replay",
                 "report")),
    ("export", ("export-go", "calibrate", "export-trace")),
    ("data", ("data", "ingest")),
    ("LLM", ("llm-check",)),
)

# One example per command, the epilog of its --help (4e1cd2: a program id or prefix).
EXAMPLES: dict[str, str] = {
    "run": "evolve run --generations 100 --seed 7\n"
           "evolve run --resume --generations 150   # continue the latest run",
    "study": "evolve study --seeds 7 1 2 3 4 --generations 60 --out runs/study",
    "fit": "evolve fit trained_physics --scope per_model --closed-loop",
    "frontier": "evolve frontier --archive archive.db",
    "show": "evolve show 4e1cd2",
    "runs": "evolve runs --archive archive.db",
    "validate": "evolve validate 4e1cd2 --out runs/val\n"
                "evolve validate 4e1cd2 --loop blis      # in BLIS's own loop (--bridge refit)",
    "generalize": "evolve generalize 4e1cd2 --mode lomo",
    "baselines": "evolve baselines --only trained-physics",
    "replay": "evolve replay 4e1cd2",
    "report": "evolve report --out runs/report",
    "export-go": "evolve export-go 4e1cd2 -o evolved.go   # the model for stock BLIS",
    "calibrate": "evolve calibrate 4e1cd2 --model-config path/to/config.json --tp 2",
    "export-trace": "evolve export-trace 20260217-155451-llama-2-7b-tp1-codegen "
                    "--out runs/trace",
    "data": "evolve data --data ../shared/data",
    "ingest": "evolve ingest trace.yaml --out mydata --model config.json --hardware H100 \\\n"
              "  --tp 1 --max-num-seqs 128 --max-num-batched-tokens 2048 --kv-blocks 7462",
    "llm-check": "evolve llm-check --llm MODEL --llm-base-url http://127.0.0.1:8000/v1",
}


def version() -> str:
    """The installed distribution's version (pyproject.toml), or "unknown" in a bare tree."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("evolve-stepml")
    except PackageNotFoundError:
        return "unknown"


def _grouped_commands() -> str:
    width = max(map(len, COMMANDS)) + 2
    lines = ["commands (evolve COMMAND --help for each, with an example):"]
    for group, names in GROUPS:
        lines.append(f"  {group}:")
        lines += [f"    {name:<{width}}{COMMANDS[name][1]}" for name in names]
    return "\n".join(lines)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="evolve", usage="evolve [-h] [--version] COMMAND [ARGS]",
        description="Discover step-time models for LLM-inference simulators by evolutionary\n"
        "program search, scored against measured vLLM runs, and export them to BLIS.",
        epilog=_grouped_commands() + "\n\nfirst steps:\n"
        "  evolve run --generations 10 --seed 7   # a short search, writes archive.db\n"
        "  evolve frontier                        # the best programs; * is the pick\n"
        "  evolve validate ID                     # the pick on every run, as BLIS gets it\n"
        "  evolve export-go ID -o evolved.go      # the model for BLIS (docs/blis.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"evolve {version()}")
    return parser


def command_parser(name: str) -> tuple[types.ModuleType, argparse.ArgumentParser]:
    """The command's module and its full parser (``evolve NAME --help``; the generated
    reference, scripts/gen_reference.py, reads the same)."""
    module = importlib.import_module(COMMANDS[name][0])
    example = EXAMPLES.get(name)
    parser = _Parser(prog=f"evolve {name}", description=COMMANDS[name][1],
                     epilog=f"example:\n  {example.replace(chr(10), chr(10) + '  ')}"
                     if example else None,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(parser)
    return module, parser


class _Parser(argparse.ArgumentParser):
    """argparse, with its error line (which quotes what was typed) shown as :func:`_shown`."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, _shown(f"{self.prog}: error: {message}") + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("--version", "-V"):
        print(f"evolve {version()}")
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        parser = _build_parser()
        if argv and argv[0] not in ("-h", "--help"):
            parser.print_usage(sys.stderr)
            print(f"evolve: error: unknown command {argv[0]!r}", file=sys.stderr)
            return 2
        parser.print_help()
        return 0
    name = argv[0]
    module, parser = command_parser(name)
    args = parser.parse_args(argv[1:])
    try:
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # a closed pipe must surface here, not at interpreter exit
        return code
    except BrokenPipeError:  # e.g. `evolve frontier | head -1`: the reader left; say nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush is quiet
        return 141
    except KeyboardInterrupt:
        print(f"evolve {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # the one place that decides how errors look
        stop_code = _interrupted(exc)
        if stop_code is not None:
            print(f"evolve {name}: interrupted", file=sys.stderr)
            return stop_code
        line = expected_error(exc, getattr(args, "archive", None))
        if line is not None:
            print(_shown(f"evolve {name}: error: {line}"), file=sys.stderr)
            return 2
        where = write_traceback(name, argv, exc)
        print(_shown(f"evolve {name}: internal error: {type(exc).__name__}: "
                     f"{_first_line(exc)} (a bug; full traceback in {where})"),
              file=sys.stderr)
        return 1


def _shown(line: str) -> str:
    """A line for the terminal: URL secrets masked, control characters escaped."""
    from evolve.text.untrusted import mask_secrets, printable

    return printable(mask_secrets(line))


def expected_error(exc: BaseException, archive: object = None) -> str | None:
    """The one-line message of an expected error, or None for a bug (``archive``: the
    command's ``--archive``, named when the database is at fault)."""
    from evaluator.api import DataError
    from evolve.errors import EvolveError

    if isinstance(exc, EvolveError | DataError):
        return _first_line(exc)
    if isinstance(exc, OSError) and exc.errno in _DISK_FULL:  # the machine, not a bug
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}cannot write ({exc.strerror})"
    if "sqlalchemy" in sys.modules:  # a database that refused (locked, full, gone, corrupt)
        from sqlalchemy.exc import DatabaseError, OperationalError
        from sqlalchemy.exc import DataError as ValueRefused  # e.g. out of a column's range

        if isinstance(exc, OperationalError | ValueRefused) or type(exc) is DatabaseError:
            where = f"{_archive_label(archive)}: " if isinstance(archive, str) else ""
            return (f"{where}archive database error: "
                    f"{_first_line(getattr(exc, 'orig', None) or exc)}")
    return None


def _archive_label(archive: str) -> str:
    """The archive as the user may see it: a path, or a URL with its password hidden."""
    from evolve.archive.engines import locate

    try:
        return locate(archive).label
    except Exception:  # an address that does not parse: named without its text
        return "the archive" if "://" in archive else archive


def _interrupted(exc: BaseException) -> int | None:
    """The exit code of a stop inside compiled code (numba's dispatcher reports the
    KeyboardInterrupt, or evolve's StopRequested, as a SystemError "returned a result with
    an exception set", the stop chained), or None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return 130
        if isinstance(getattr(cur, "exit_code", None), int) and type(cur).__name__ == \
                "StopRequested":
            return int(cur.exit_code)  # type: ignore[attr-defined]
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


def write_traceback(name: str, argv: list[str], exc: BaseException) -> str:
    """Write the full traceback of an unexpected error to a file; returns its path. The
    command line and the traceback have their URLs' secrets masked (a crash file is what
    a user attaches to a bug report)."""
    from evolve.text.untrusted import mask_secrets

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    text = mask_secrets(f"evolve {' '.join(argv)}\n{stamp} pid {os.getpid()}\n\n"
                        + "".join(traceback.format_exception(exc)))
    try:
        fd, path = tempfile.mkstemp(prefix=f"evolve-{name}-{stamp}-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        return path
    except OSError:  # nowhere to write: the traceback goes to stderr after all
        sys.stderr.write(text)
        return "stderr above"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
