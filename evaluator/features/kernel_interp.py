"""Interpolation of the packed kernel curves (:mod:`evaluator.data.kernel_tables`), compiled by
numba.

Why a module of its own: the feature kernel calls these for every simulated step, the Go
export mirrors them line by line, and the leave-one-out check of the tables
(``scripts/kernel_tables.py``) uses them too, so the rules live in one place:

* ``interp_loglog``: piecewise linear in (log x, log y) between table points. Below the
  first point: flat (``below_slope`` False; a GEMM of fewer rows than the smallest measured
  is as slow: it is bound by reading the weights) or the first segment's log-log slope
  (``below_slope`` True; prefill attention of a short sequence). Above the last point: the
  physical exponent ``above_exp`` (1 for a GEMM: time linear in rows at constant
  efficiency; 2 for prefill attention: quadratic in the sequence).
* ``bilinear``: decode attention over (batch size, KV length), linear in both inside the
  grid (memory-bound time is an overhead plus bytes, and bytes are batch x length), the
  edge segment's linear extrapolation outside it, never below the grid's smallest value
  (a kernel launch).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

HEADER = 5  # flag, n_m, n_b, n_l, n_s (evaluator.data.kernel_tables.BLOCK_HEADER)


@nb.njit(cache=True)
def interp_loglog(x: np.ndarray, y: np.ndarray, v: float, below_slope: bool,
                  above_exp: float) -> float:
    """``y(v)`` from the curve (x, y), both increasing and positive; 0 for ``v <= 0``."""
    n = x.shape[0]
    if v <= 0.0:
        return 0.0
    if v >= x[n - 1]:
        return y[n - 1] * (v / x[n - 1]) ** above_exp
    if v <= x[0]:
        if not below_slope:
            return y[0]
        p = math.log(y[1] / y[0]) / math.log(x[1] / x[0])
        return y[0] * (v / x[0]) ** p
    j = 0
    while x[j + 1] < v:
        j += 1
    w = math.log(v / x[j]) / math.log(x[j + 1] / x[j])
    return math.exp(math.log(y[j]) + w * math.log(y[j + 1] / y[j]))


@nb.njit(cache=True)
def _segment(x: np.ndarray, v: float) -> int:
    n = x.shape[0]
    if v <= x[0]:
        return 0
    if v >= x[n - 1]:
        return n - 2
    j = 0
    while x[j + 1] < v:
        j += 1
    return j


@nb.njit(cache=True)
def bilinear(bx: np.ndarray, lx: np.ndarray, t: np.ndarray, b: float, ell: float) -> float:
    """``t(b, ell)`` from the grid ``t[len(bx) * len(lx)]`` (row-major, batch-major)."""
    nl = lx.shape[0]
    i = _segment(bx, b)
    j = _segment(lx, ell)
    wb = (b - bx[i]) / (bx[i + 1] - bx[i])
    wl = (ell - lx[j]) / (lx[j + 1] - lx[j])
    t00 = t[i * nl + j]
    t01 = t[i * nl + j + 1]
    t10 = t[(i + 1) * nl + j]
    t11 = t[(i + 1) * nl + j + 1]
    out = (1.0 - wb) * ((1.0 - wl) * t00 + wl * t01) + wb * ((1.0 - wl) * t10 + wl * t11)
    # grids are non-decreasing in both axes (evaluator.data.kernel_tables): t[0] is the min
    lo = t[0]
    return out if out > lo else lo


@nb.njit(cache=True)
def kernel_times(kb: np.ndarray, tokens: float, bs: float, n_dc: float, dc_ctx: float,
                 pf_pairs: float, layers: float, n_exp: float, topk: float
                 ) -> tuple[float, float, float]:
    """(GEMM, decode attention, prefill attention) in us for one step, from block ``kb``.

    ``dc_ctx``: KV positions the decode requests attend over in total (sum of k_i + 1);
    ``pf_pairs``: causal query-key pairs of the prefill chunks (``pf_attn_pairs``), priced
    as one sequence of the same work, ``sqrt(2 * pairs)`` tokens long.
    """
    nm = int(kb[1])
    nb_ = int(kb[2])
    nl = int(kb[3])
    ns = int(kb[4])
    o = HEADER
    m = kb[o:o + nm]
    g_dense = kb[o + nm:o + 2 * nm]
    g_exp = kb[o + 2 * nm:o + 3 * nm]
    g_lm = kb[o + 3 * nm:o + 4 * nm]
    o += 4 * nm
    bx = kb[o:o + nb_]
    lx = kb[o + nb_:o + nb_ + nl]
    dt = kb[o + nb_ + nl:o + nb_ + nl + nb_ * nl]
    o += nb_ + nl + nb_ * nl
    sx = kb[o:o + ns]
    pt = kb[o + ns:o + 2 * ns]

    gemm = 0.0
    if tokens > 0.0:
        gemm = interp_loglog(m, g_dense, tokens, False, 1.0)
        gemm += interp_loglog(m, g_lm, bs, False, 1.0)
        if n_exp > 1.0:
            touched = n_exp * (1.0 - (1.0 - topk / n_exp) ** tokens)
            gemm += touched * interp_loglog(m, g_exp, tokens * topk / touched, False, 1.0)
    dc = 0.0
    if n_dc > 0.0:
        dc = layers * bilinear(bx, lx, dt, n_dc, dc_ctx / n_dc)
    pf = 0.0
    if pf_pairs > 0.0:
        pf = layers * interp_loglog(sx, pt, math.sqrt(2.0 * pf_pairs), True, 2.0)
    return gemm, dc, pf
