"""The words users read for the domain's codes: engine loops, scoring modes, run labels.

Why a leaf module: the validation tables, the report and the commands all print them, and
each must say the same thing; none of them should import the command line to do so.
"""

from __future__ import annotations

LOOP_NAMES = {"vllm": "vLLM's engine loop", "blis": "BLIS's engine loop"}

MODE_WORDS = {"closed_loop_slice": "closed loop on stage slices",
              "closed_loop": "closed loop on the whole run",
              "teacher_forced": "teacher forced on the run's corpora",
              "lomo_teacher_forced": "teacher forced, its model held out"}


def run_label(name: str) -> str:
    """A run's name without its timestamp prefix (``20260217-155451-``), as tables show it."""
    return name[16:] if name[:8].isdigit() else name
