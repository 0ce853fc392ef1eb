"""What a command acts on: a program and its constants, from the archive or from a file.

Why a module of its own: ``validate``, ``generalize`` (and future commands) take the same
``PROGRAM [--archive A] [--run N] [--constants JSON]`` arguments; commands never import
each other, so the shared reading lives here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from evolve.errors import UserError
from evolve.language import Program


def infer_scope(groups: dict[str, Any], scenarios: Any) -> str:
    """The constant scope a set of fitted groups implies (global / per_model / per_scenario)."""
    keys = set(groups)
    if keys == {"global"}:
        return "global"
    if keys <= {s.model for s in scenarios}:
        return "per_model"
    return "per_scenario"


def load_target(args: argparse.Namespace) -> tuple[Program, dict[str, Any], str]:
    """(program, constant groups, label) from the archive or from a file."""
    from evolve.errors import ProgramError
    from evolve.language import parse_program

    path = Path(args.program)
    if path.suffix == ".py" or path.exists():
        try:
            program = parse_program(path.read_bytes())
        except OSError as exc:
            raise UserError(f"{path}: cannot read ({exc.strerror})") from None
        except ProgramError as exc:
            raise UserError(f"{path}: {exc}") from None
        groups = {}
        if args.constants:
            try:
                groups = json.loads(Path(args.constants).read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise UserError(f"{args.constants}: not a readable JSON file ({exc})") from None
        return program, groups, path.stem
    from evolve.archive.engines import exists
    from evolve.archive.store import Archive

    if not exists(args.archive):
        raise UserError(f"{args.archive}: archive not found (run `evolve run` first)")
    with Archive(args.archive, create=False) as ar:
        pid = ar.resolve_id(args.program)
        evals = [e for e in ar.evaluations_of(pid) if e.status == "accepted" and e.constants
                 and (args.run is None or e.run_id == args.run)]
        if not evals:
            raise UserError(f"{args.archive}: program {pid[:12]} has no accepted evaluation")
        rows = ar.program(pid, evals[-1].run_id)
        program = parse_program(rows[0].source)
        return program, evals[-1].constants, pid[:12]
