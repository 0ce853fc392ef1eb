"""Helpers shared by the fitting tests (a module of its own: ``conftest`` is not importable
by name when several directories have one)."""

from __future__ import annotations

from pathlib import Path

from evolve.program.language import Program, parse_program

SEEDS = Path(__file__).resolve().parents[2] / "seeds"

# step times -a - tp < 0 for every a in [0, 5]: no constants are ever valid
ALWAYS_INVALID = ('CONSTANTS = {"a": (1.0, 0.0, 5.0)}\n'
                  "def step_time(f, c):\n    return -c.a - f.tp\n")


def seed_program(name: str) -> Program:
    """A bundled seed program by file stem (``seeds/<name>.py``)."""
    return parse_program((SEEDS / f"{name}.py").read_text())


def slow_roofline() -> Program:
    """The roofline seed started at 40 ms of overhead per step: far too slow."""
    src = (SEEDS / "roofline.py").read_text().replace('"overhead_us": (3000.0,',
                                                      '"overhead_us": (40000.0,')
    assert src != (SEEDS / "roofline.py").read_text()
    return parse_program(src)
