"""Importing evolve pins OpenBLAS's kernel family before numpy loads (evaluator/__init__.py):
the golden archive depended on which kernels OpenBLAS picked for the CPU."""

from __future__ import annotations

import os
import subprocess
import sys

from evaluator import _cpu_flags

PROBE = "import evolve, os; print(os.environ.get('OPENBLAS_CORETYPE', 'unset'))"


def _probe(**env: str) -> str:
    base = {k: v for k, v in os.environ.items()
            if k not in ("OPENBLAS_CORETYPE", "EVOLVE_NATIVE_BLAS")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_importing_evolve_pins_haswell_kernels_where_the_cpu_has_them():
    expected = "Haswell" if {"avx2", "fma"} <= _cpu_flags() else "unset"
    assert _probe() == expected


def test_a_users_choice_and_the_opt_out_are_kept():
    assert _probe(OPENBLAS_CORETYPE="SkylakeX") == "SkylakeX"
    assert _probe(EVOLVE_NATIVE_BLAS="1") == "unset"


def test_numpy_loaded_first_is_left_alone():
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    out = subprocess.run([sys.executable, "-c", "import numpy; " + PROBE], env=base,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "unset"


def test_the_suite_imports_the_real_package_and_its_pin():
    """Under plain `pytest` (CI's command) `tests/evaluator/` once shadowed the package as a
    namespace, and the pin never ran in the process the golden archive test runs in."""
    import evaluator

    assert evaluator.__file__ and evaluator.__file__.endswith("evaluator/__init__.py")
    if {"avx2", "fma"} <= _cpu_flags() and not os.environ.get("EVOLVE_NATIVE_BLAS"):
        assert os.environ.get("OPENBLAS_CORETYPE")
