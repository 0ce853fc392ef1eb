"""Every random stream of a run, derived from the run seed and a position, never a clock.

Why positions: a resumed run must draw exactly what an uninterrupted one would, and the
result of a child's fit must not depend on which worker fitted it or when. So each
generation has one stream per *purpose* (selection, operator) and each child's CMA-ES fit
a seed derived from ``(run seed, generation, child index)``.
"""

from __future__ import annotations

import numpy as np

PURPOSE_SELECT, PURPOSE_OPERATOR = 1, 2


def child_seed(run_seed: int, generation: int, index: int) -> int:
    """A positive 31-bit seed for one child's fit, derived only from its position."""
    ss = np.random.SeedSequence([int(run_seed), int(generation), int(index), 2])
    return int(ss.generate_state(1, np.uint32)[0] % (2**31 - 2)) + 1


def generation_rng(run_seed: int, generation: int, purpose: int) -> np.random.Generator:
    """The random stream of one purpose in one generation (resume draws the same)."""
    return np.random.default_rng(np.random.SeedSequence([int(run_seed), int(generation),
                                                         int(purpose)]))
