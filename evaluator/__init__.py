"""evaluator: measured vLLM runs, a closed-loop vLLM scheduler replica, and scoring.

Never imports ``evolve``; ``evolve`` reaches it only through ``evaluator.api``.

Importing the package pins OpenBLAS to one kernel family before numpy loads it
(:func:`pin_blas_kernels`): same seed, same archive, on more than one kind of CPU.
"""

from __future__ import annotations

import os
import sys

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
    came from (tests/search/test_golden_archive.py failed there, found 2026-11-26). Pinned,
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


pin_blas_kernels()
