"""Importing evolve pins OpenBLAS's kernel family and numpy's SIMD level before numpy loads
(evaluator/__init__.py): the golden archive depended on which kernels OpenBLAS picked for
the CPU, and on whether numpy ran its AVX-512 or its AVX2 loops."""

from __future__ import annotations

import os
import subprocess
import sys

from evaluator import NUMPY_AVX512_NEW, NUMPY_AVX512_OLD, _cpu_flags, _numpy_version

PROBE = "import evolve, os; print(os.environ.get('OPENBLAS_CORETYPE', 'unset'))"


def _run(code: str, unset: tuple[str, ...], env: dict[str, str]) -> str:
    """What ``code`` prints in a fresh interpreter without the ``unset`` variables."""
    base = {k: v for k, v in os.environ.items() if k not in unset}
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env},
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _probe(**env: str) -> str:
    return _run(PROBE, ("OPENBLAS_CORETYPE", "EVOLVE_NATIVE_BLAS"), env)


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


SIMD_PROBE = "import evolve, os; print(os.environ.get('NPY_DISABLE_CPU_FEATURES', 'unset'))"
HAS_AVX512 = {"avx2", "fma", "avx512f"} <= _cpu_flags()
NAMES = NUMPY_AVX512_NEW if _numpy_version() >= (2, 4) else NUMPY_AVX512_OLD


def _simd_probe(code: str = SIMD_PROBE, **env: str) -> str:
    return _run(code, ("NPY_DISABLE_CPU_FEATURES", "EVOLVE_NATIVE_SIMD"), env)


def test_importing_evolve_turns_numpys_avx512_loops_off_where_the_cpu_has_them():
    assert _simd_probe() == (NAMES if HAS_AVX512 else "unset")


def test_numpy_then_runs_no_avx512_loop():
    """The names are ones this numpy knows: every AVX-512 target it dispatches to is off."""
    code = ("import evolve\nfrom numpy._core._multiarray_umath import __cpu_dispatch__, "
            "__cpu_features__ as f\nprint(' '.join(sorted(t for t in __cpu_dispatch__ "
            "if f.get(t))))")
    on = _simd_probe(code).split()
    if HAS_AVX512:
        assert not [t for t in on if t in NAMES.split()], on
    native = _simd_probe(code, EVOLVE_NATIVE_SIMD="1").split()
    assert set(on) <= set(native)


def test_a_users_simd_choice_and_the_opt_out_are_kept():
    assert _simd_probe(NPY_DISABLE_CPU_FEATURES="AVX512_SPR") == "AVX512_SPR"
    assert _simd_probe(EVOLVE_NATIVE_SIMD="1") == "unset"
    assert _simd_probe("import numpy; " + SIMD_PROBE) == "unset"


def test_the_suite_runs_with_the_simd_pin():
    if HAS_AVX512 and not os.environ.get("EVOLVE_NATIVE_SIMD"):
        assert os.environ.get("NPY_DISABLE_CPU_FEATURES")
