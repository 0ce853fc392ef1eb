"""evaluator: measured vLLM runs, a closed-loop vLLM scheduler replica, and scoring.

Never imports ``evolve``; ``evolve`` reaches it only through ``evaluator.api``.

Importing the package pins OpenBLAS to one kernel family and numpy to its AVX2 loops before
numpy loads (:func:`pin_blas_kernels`, :func:`pin_numpy_simd`): same seed, same archive, on
any x86-64 CPU with AVX2 and FMA.
"""

from __future__ import annotations

import os
import sys
from importlib import metadata

# the variables the two pins below set, for processes that do not import evaluator first
# (a Ray cluster started elsewhere: evolve/search/execution/ray_tasks.py)
PINNED_ENV = ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")
BLAS_CORETYPE = "Haswell"  # AVX2 + FMA kernels: every x86-64 CPU since 2013, AMD Zen too


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


def pin_blas_kernels() -> str | None:
    """Set ``OPENBLAS_CORETYPE`` (unless set, or numpy is loaded already) so that OpenBLAS
    uses its Haswell kernels on any x86-64 CPU that has them; returns what it set.

    Why: OpenBLAS picks its kernels by CPU model, and the kernels round differently. CMA-ES
    samples and adapts through BLAS and LAPACK (``numpy.linalg``), so the same seed fitted
    other constants on a Sapphire Rapids machine than on the machines the recorded archives
    came from (tests/integration/test_golden_archive.py failed there, found 2026-11-26). Pinned,
    the archive depends on the CPU only through numpy's own SIMD level (AVX-512 or AVX2
    versions of exp/log/power), which docs/architecture.md states. Off with
    ``EVOLVE_NATIVE_BLAS=1``.
    """
    if os.environ.get("EVOLVE_NATIVE_BLAS") or "OPENBLAS_CORETYPE" in os.environ:
        return None
    if "numpy" in sys.modules or not {"avx2", "fma"} <= _cpu_flags():
        return None
    os.environ["OPENBLAS_CORETYPE"] = BLAS_CORETYPE
    return BLAS_CORETYPE


# numpy's AVX-512 dispatch targets, by the names the installed numpy knows them by
NUMPY_AVX512_NEW = "X86_V4 AVX512_ICL AVX512_SPR"  # numpy >= 2.4
NUMPY_AVX512_OLD = ("AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX "
                    "AVX512_CNL AVX512_ICL AVX512_SPR")


def _numpy_version() -> tuple[int, int]:
    try:
        major, minor = metadata.version("numpy").split(".")[:2]
        return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)
    except (metadata.PackageNotFoundError, ValueError):
        return (0, 0)


def pin_numpy_simd() -> str | None:
    """Set ``NPY_DISABLE_CPU_FEATURES`` (unless set, or numpy is loaded already) so that
    numpy runs its AVX2 loops on a CPU with AVX-512; returns what it set.

    Why: numpy picks each ufunc's loop by the CPU, and its AVX-512 and AVX2 ``exp``,
    ``log`` and ``power`` differ in the last bit; the fits amplify a last bit into other
    constants, so a 12-generation archive came out different (digest 9bd3ad45... native,
    4f97d108... with AVX-512 off, on the same machine, 2026-11-27). Off, an AVX-512
    machine takes the loops an AVX2 machine takes, and the archives agree (the golden
    search on an emulated AVX2-only CPU: tests/integration/test_golden_archive.py). Off with
    ``EVOLVE_NATIVE_SIMD=1``.
    """
    if os.environ.get("EVOLVE_NATIVE_SIMD") or "NPY_DISABLE_CPU_FEATURES" in os.environ:
        return None
    flags = _cpu_flags()
    if "numpy" in sys.modules or not {"avx2", "fma", "avx512f"} <= flags:
        return None
    names = NUMPY_AVX512_NEW if _numpy_version() >= (2, 4) else NUMPY_AVX512_OLD
    os.environ["NPY_DISABLE_CPU_FEATURES"] = names
    return names


pin_blas_kernels()
pin_numpy_simd()
