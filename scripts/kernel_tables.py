"""Print the leave-one-out interpolation error of the kernel tables (``docs/kernels.md``).

Usage::

    python scripts/kernel_tables.py [--data ../shared/data]

For each rule of the kernel features (GEMM along m, GEMM across shapes, decode attention
along KV length and batch, prefill attention along sequence length) it holds each interior
table point out, interpolates it from the rest with the features' own functions
(:mod:`evaluator.features.kernel_loo`), and prints the median, 90th percentile and worst relative
error. ``tests/evaluator/features/test_kernels.py`` asserts bounds on the same figures.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from evaluator.data.kernel_tables import KernelTables
from evaluator.features.kernel_loo import leave_one_out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.environ.get("EVOLVE_DATA", "../shared/data"))
    args = ap.parse_args()
    tables = KernelTables.load(Path(args.data))
    if tables is None:
        raise SystemExit(f"{args.data}/kernels/bench_data: no kernel tables")
    print(f"{'family':<14}{'points':>8}{'median':>9}{'p90':>9}{'worst':>9}")
    for st in leave_one_out(tables):
        print(f"{st.family:<14}{st.errors.size:>8}{st.median:>9.1%}{st.p90:>9.1%}"
              f"{st.worst:>9.1%}")


if __name__ == "__main__":
    main()
