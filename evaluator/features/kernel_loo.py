"""How well the kernel interpolation rules predict table points they were not given.

Why: a kernel feature is only as good as its value between and beyond the measured points,
and a model shape or a context length nobody measured is exactly where the search needs it.
So each rule of :mod:`evaluator.features.kernel_interp` is scored by leave-one-out on the cleaned
tables: hold one interior point (or one whole shape) out, interpolate it from the rest with
the same function the features use, compare with the measurement.

Families (see ``docs/kernels.md``):

* ``gemm_m``: each interior token count m of each (k, n) curve, from its neighbours
  (``interp_loglog``, log-log linear);
* ``gemm_shape``: each (k, n) pair whose k is interior to the grid, from the pairs around it
  (bilinear efficiency in (log k, log n), :func:`evaluator.data.kernel_tables.gemm_mfu`); this
  is how a
  model's own projection shapes are priced;
* ``decode_len``: each interior measured KV length of each decode grid (``bilinear``);
* ``decode_batch``: each interior measured batch size of each decode grid;
* ``prefill``: each interior sequence length of each prefill curve (``interp_loglog``).

``scripts/kernel_tables.py`` prints the figures; ``tests/evaluator/features/test_kernels.py`` holds
the bounds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from evaluator.data.kernel_tables import TABLE_PEAK_FLOPS, KernelTables, gemm_mfu
from evaluator.features.kernel_interp import bilinear, interp_loglog


@dataclass(frozen=True)
class LooStats:
    """Relative errors ``|predicted / measured - 1|`` of one family's held-out points."""

    family: str
    errors: np.ndarray

    @property
    def median(self) -> float:
        return float(np.median(self.errors))

    @property
    def p90(self) -> float:
        return float(np.quantile(self.errors, 0.9))

    @property
    def worst(self) -> float:
        return float(np.max(self.errors))


def _rel(pred: float, meas: float) -> float:
    return abs(pred / meas - 1.0)


def _curves(curves: list[tuple[np.ndarray, np.ndarray]], below_slope: bool,
            above_exp: float) -> list[float]:
    """Each interior point of each curve, from the rest of its curve (``interp_loglog``)."""
    out = []
    for x, t in curves:
        for j in range(1, x.size - 1):
            keep = np.arange(x.size) != j
            out.append(_rel(interp_loglog(x[keep], t[keep], x[j], below_slope, above_exp),
                            t[j]))
    return out


def _gemm_shape(tables: KernelTables) -> list[float]:
    ks = sorted({kn[0] for kn in tables.gemm})
    out: list[float] = []
    for k in ks[1:-1]:
        rest = replace(tables, gemm={kn: v for kn, v in tables.gemm.items() if kn[0] != k})
        for (kk, n), (m, t) in tables.gemm.items():
            if kk != k:
                continue
            _, mfu = gemm_mfu(rest, k, n)
            pred = 2.0 * m * k * n / (mfu * TABLE_PEAK_FLOPS) * 1e6
            out.extend(_rel(p, q) for p, q in zip(pred, t, strict=True))
    return out


def _decode(tables: KernelTables, axis: int) -> list[float]:
    out = []
    for key, (b, lv, t) in tables.decode.items():
        measured = tables.decode_measured[key]
        n = t.shape[axis]
        for j in range(1, n - 1):
            keep = np.arange(n) != j
            bx, lx = (b[keep], lv) if axis == 0 else (b, lv[keep])
            grid = np.ascontiguousarray(np.compress(keep, t, axis=axis)).ravel()
            for i in range(t.shape[1 - axis]):
                cell = (j, i) if axis == 0 else (i, j)
                if measured[cell]:
                    out.append(_rel(bilinear(bx, lx, grid, b[cell[0]], lv[cell[1]]), t[cell]))
    return out


def leave_one_out(tables: KernelTables) -> list[LooStats]:
    """Held-out relative errors per family, in the order of the module docstring."""
    fams = {"gemm_m": _curves(list(tables.gemm.values()), False, 1.0),
            "gemm_shape": _gemm_shape(tables),
            "decode_len": _decode(tables, axis=1), "decode_batch": _decode(tables, axis=0),
            "prefill": _curves(list(tables.prefill.values()), True, 2.0)}
    return [LooStats(name, np.asarray(errs, dtype=np.float64)) for name, errs in fams.items()]
