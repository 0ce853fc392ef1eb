"""Program fingerprints (evolve/search/fingerprint.py): a rewrite of a judged program
shares its print, a different function does not, and NaN never makes two different
programs look alike."""

from __future__ import annotations

import numpy as np

from evaluator.api import FEATURE_NAMES, N_FEATURES
from evolve.program.language import parse_program
from evolve.search.fingerprint import fingerprint, probe_bytes, probe_from_bytes

PROBE = np.random.default_rng(0).uniform(1.0, 500.0, size=(N_FEATURES, 40))
W = FEATURE_NAMES[0]


def prog(body: str, consts: str = '{"a": (2.0, 0.5, 8.0), "b": (3.0, 0.5, 8.0)}'):
    return parse_program(f"CONSTANTS = {consts}\ndef step_time(f, c):\n    return {body}\n")


def test_an_algebraic_rewrite_shares_the_print_a_new_function_does_not():
    base = fingerprint(prog(f"c.a * (f.{W} + c.b)"), PROBE, 9)
    assert fingerprint(prog(f"c.a * f.{W} + c.a * c.b"), PROBE, 9) == base
    assert fingerprint(prog(f"c.a * f.{W} + c.b"), PROBE, 9) != base
    # a term neutral at the declared constants differs at the second (probe) point
    neutral = prog(f"c.a * (f.{W} + c.b) + c.z * f.{W}",
                   '{"a": (2.0, 0.5, 8.0), "b": (3.0, 0.5, 8.0), "z": (0.0, 0.0, 4.0)}')
    assert fingerprint(neutral, PROBE, 9) != base


def test_programs_that_are_nan_on_the_probes_never_share_a_print():
    """Both are NaN at both probe points, but fitted elsewhere in their boxes they are
    different functions: equal prints would reject the second as a duplicate."""
    one = prog(f"sqrt(f.{W} - 1e9 * c.a)")
    two = prog(f"c.b * f.{W} + log(f.{W} - 1e9 * c.a)")
    a, b = fingerprint(one, PROBE, 9), fingerprint(two, PROBE, 9)
    assert a != b and a.startswith("nonfinite:") and b.startswith("nonfinite:")
    assert fingerprint(one, PROBE, 9) == a  # still a function of the program alone


def test_the_probe_round_trips_bit_for_bit():
    assert np.array_equal(probe_from_bytes(probe_bytes(PROBE)), PROBE)
