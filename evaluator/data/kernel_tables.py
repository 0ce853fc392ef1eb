"""Measured kernel latencies (``<data>/kernels/bench_data``) as per-model cost curves.

Why: analytical features price a step at datasheet peaks, so a program must learn the
efficiency of each kernel from the runs it is fitted on, and that efficiency changes with
shape (a 4,000-token context is not a 600-token one). The microbenchmarks measured the
kernels themselves, for exactly our model shapes, out to 131,072-token contexts: a feature
read from them carries that knowledge to contexts, loads and models the training runs never
reached (Vidur's approach: profile operators, interpolate).

This module reads and cleans the tables and packs, per scenario (model shape, TP, GPU), a
flat float vector (:data:`BLOCK_HEADER` then the curves) that the numba feature kernel
(:mod:`evaluator.features.kernel_interp`) and the Go export interpolate with the same rules. The
rules are in ``docs/kernels.md``; in short:

* **GEMM**: the table gives latency at (m, k, n) for 14 token counts m and a 4 x 2 grid of
  (k, n). For each projection of the model (fused qkv, o, fused gate_up, down, lm_head; for
  MoE one expert's gate_up and down) the efficiency (MFU) at each table m is interpolated
  bilinearly in (log k, log n), clamped to the grid's edge outside it, and turned into a
  time ``2 m k n / (mfu * peak)``. The per-model curves over m are what the block holds.
* **Decode attention**: per (heads, kv_heads, head_dim, tp) a grid of batch size x KV
  length; used as it is (per layer, per GPU).
* **Prefill attention**: per (heads, kv_heads, head_dim) a curve over sequence length at
  TP 1; a GPU of a TP group runs ``heads / tp`` heads, so the time is divided by ``tp``.
* Decode cells the benchmark could not run (batch x length beyond the GPU's memory) are
  extended linearly in KV length from the row's last two measured points.
* Cleaning: every curve is made non-decreasing by a suffix minimum (a point higher than a
  later one is a warm-up outlier; batch 1 at 1,024 tokens measured 40 us, at 4,096 23 us).
* A shape without its own attention table borrows the closest one with the same head_dim,
  scaled by the per-GPU KV-head (decode) or head (prefill) count; another GPU scales GEMM
  and prefill times by the peak-FLOP ratio, decode attention by the bandwidth ratio.
* No tables in the data directory: the block says so (flag 0) and the kernel features fall
  back to their roofline equivalents (``max(flops / peak, bytes / bw)``).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluator.data.scenarios import DataError, Hardware, ModelArch

TABLE_PEAK_FLOPS = 989.5e12  # the tables were measured on H100 SXM (dense bf16)
TABLE_HBM_BW = 3.35e12
# Header of the packed block: flag (1 = measured tables), then the section lengths.
BLOCK_HEADER = ("flag", "n_m", "n_b", "n_l", "n_s")


@dataclass(frozen=True)
class KernelTables:
    """The cleaned microbenchmark tables of one GPU."""

    gemm: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]  # (k, n) -> (m, latency_us)
    decode: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # key -> (b, l, t[b, l])
    prefill: dict[str, tuple[np.ndarray, np.ndarray]]  # "h-kv-d" -> (seq_len, latency_us)
    root: Path
    decode_measured: dict[str, np.ndarray]  # key -> bool[b, l]: cell measured, not extended

    @classmethod
    def load(cls, data: Path) -> KernelTables | None:
        """The tables under ``data/kernels/bench_data`` (H100), or None if there are none."""
        root = data / "kernels" / "bench_data"
        if not root.is_dir():
            return None
        gemm_rows = _rows(root / "gemm" / "h100" / "data.csv", ("m", "k", "n", "latency_us"))
        by_kn: dict[tuple[int, int], list[tuple[float, float]]] = {}
        for r in gemm_rows:
            by_kn.setdefault((int(r["k"]), int(r["n"])), []).append((r["m"], r["latency_us"]))
        gemm = {kn: _curve(sorted(v)) for kn, v in by_kn.items()}
        decode, measured = {}, {}
        for p in sorted((root / "mha" / "decode" / "h100").glob("*.csv")):
            rows = _rows(p, ("batch_size", "kv_len", "latency_us"))
            b, lv, t, mask = _grid(p, rows)
            decode[p.stem], measured[p.stem] = (b, lv, t), mask
        prefill = {}
        for p in sorted((root / "mha" / "prefill" / "h100").glob("*.csv")):
            rows = _rows(p, ("seq_len", "latency_us"))
            prefill[p.stem] = _curve(sorted((r["seq_len"], r["latency_us"]) for r in rows))
        if not gemm or not decode or not prefill:
            raise DataError(f"{root}: kernel tables incomplete (need gemm, mha/decode and "
                            "mha/prefill under h100/)")
        return cls(gemm, decode, prefill, root, measured)


def _rows(path: Path, fields: tuple[str, ...]) -> list[dict[str, float]]:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [f for f in fields if f not in (reader.fieldnames or [])]
            if missing:
                raise DataError(f"{path}: missing column '{missing[0]}'")
            out = []
            for i, row in enumerate(reader, start=2):
                rec = {}
                for f in fields:
                    try:
                        v = float(row[f])
                    except (TypeError, ValueError):
                        raise DataError(f"{path}: row {i}, field '{f}': not a number") from None
                    if not (math.isfinite(v) and v > 0):
                        raise DataError(f"{path}: row {i}, field '{f}': must be > 0")
                    rec[f] = v
                out.append(rec)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    except csv.Error as exc:  # e.g. a field past the csv module's size limit
        raise DataError(f"{path}: not a readable CSV ({exc})") from None
    if len(out) < 2:
        raise DataError(f"{path}: fewer than 2 rows")
    return out


def suffix_min(y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Make a curve non-decreasing: each point becomes the minimum of itself and later ones."""
    flipped = np.flip(y, axis=axis)
    return np.flip(np.minimum.accumulate(flipped, axis=axis), axis=axis)


def _curve(pairs: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([p[0] for p in pairs], dtype=np.float64)
    y = np.array([p[1] for p in pairs], dtype=np.float64)
    return x, suffix_min(y)


def _grid(path: Path, rows: list[dict[str, float]]
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    b = np.unique([r["batch_size"] for r in rows])
    lv = np.unique([r["kv_len"] for r in rows])
    t = np.full((b.size, lv.size), np.nan)
    for r in rows:
        t[np.searchsorted(b, r["batch_size"]), np.searchsorted(lv, r["kv_len"])] = r["latency_us"]
    mask = ~np.isnan(t)
    for i in range(b.size):  # cells beyond GPU memory were not measured: extend each row
        have = np.flatnonzero(~np.isnan(t[i]))
        if have.size < 2 or have[-1] != have.size - 1:
            raise DataError(f"{path}: field 'latency_us': batch_size {b[i]:.0f} needs the "
                            "two shortest kv_len values and no gaps between measured ones")
        j0, j1 = have[-2], have[-1]
        slope = (t[i, j1] - t[i, j0]) / (lv[j1] - lv[j0])
        t[i, j1 + 1:] = t[i, j1] + slope * (lv[j1 + 1:] - lv[j1])
    return b, lv, suffix_min(suffix_min(t, axis=1), axis=0), mask


def gemm_mfu(tables: KernelTables, k: float, n: float) -> tuple[np.ndarray, np.ndarray]:
    """(m, MFU at the table's m points) for a k x n weight, bilinear in (log k, log n)."""
    ks = np.array(sorted({kn[0] for kn in tables.gemm}), dtype=np.float64)
    ns = np.array(sorted({kn[1] for kn in tables.gemm}), dtype=np.float64)
    m = tables.gemm[(int(ks[0]), int(ns[0]))][0]

    def mfu(kk: float, nn: float) -> np.ndarray:
        mm, t = tables.gemm[(int(kk), int(nn))]
        if not np.array_equal(mm, m):
            raise DataError(f"{tables.root}/gemm: m points differ between (k, n) pairs")
        return 2.0 * m * kk * nn / (t * 1e-6 * TABLE_PEAK_FLOPS)

    def bracket(grid: np.ndarray, v: float) -> tuple[int, int, float]:
        v = min(max(v, grid[0]), grid[-1])  # clamp: constant efficiency outside the grid
        j = int(np.searchsorted(grid, v, side="right")) - 1
        j = min(max(j, 0), grid.size - 2) if grid.size > 1 else 0
        if grid.size == 1:
            return 0, 0, 0.0
        w = (math.log(v) - math.log(grid[j])) / (math.log(grid[j + 1]) - math.log(grid[j]))
        return j, j + 1, w

    k0, k1, wk = bracket(ks, k)
    n0, n1, wn = bracket(ns, n)
    out = ((1 - wk) * (1 - wn) * mfu(ks[k0], ns[n0]) + wk * (1 - wn) * mfu(ks[k1], ns[n0])
           + (1 - wk) * wn * mfu(ks[k0], ns[n1]) + wk * wn * mfu(ks[k1], ns[n1]))
    return m, out


def gemm_curve(tables: KernelTables, shapes: list[tuple[float, float]], peak: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """Summed latency (us) of GEMMs ``shapes`` [(k, n)] at each table m, on a GPU of ``peak``."""
    total = None
    m = np.zeros(0)
    for k, n in shapes:
        m, mfu = gemm_mfu(tables, k, n)
        t = 2.0 * m * k * n / (mfu * peak) * 1e6
        total = t if total is None else total + t
    assert total is not None
    return m, total


def _attn_key(tables: dict[str, Any], heads: int, kv: int, hd: int, tp: int | None
              ) -> tuple[str, float]:
    """The table for a shape (exact, or the closest with the same head_dim, scaled)."""
    suffix = f"-tp{tp}" if tp is not None else ""
    exact = f"{heads}-{kv}-{hd}{suffix}"
    if exact in tables:
        return exact, 1.0
    per_gpu = (kv if tp is not None else heads) / (tp or 1) * hd

    def cost(key: str) -> tuple[float, str]:
        parts = key.split("-")
        h, k, d = int(parts[0]), int(parts[1]), int(parts[2])
        t = int(parts[3][2:]) if tp is not None else 1
        other = (k if tp is not None else h) / t * d
        return (abs(math.log(other / per_gpu)) + (0.0 if d == hd else 10.0), key)

    best = min(tables, key=cost)
    parts = best.split("-")
    h, k, d = int(parts[0]), int(parts[1]), int(parts[2])
    t = int(parts[3][2:]) if tp is not None else 1
    return best, per_gpu / ((k if tp is not None else h) / t * d)


def kernel_block(tables: KernelTables | None, arch: ModelArch, tp: int, hw: Hardware
                 ) -> np.ndarray:
    """The packed per-scenario block (header, then the curves); flag 0 without tables."""
    if tables is None:
        return np.zeros(len(BLOCK_HEADER), dtype=np.float64)
    hd, h, kv = arch.head_dim, arch.heads, arch.kv_heads
    f_scale = TABLE_PEAK_FLOPS / hw.peak_flops
    b_scale = TABLE_HBM_BW / hw.hbm_bw
    qkv = (float(arch.hidden), (h + 2.0 * kv) * hd / tp)
    o_proj = (h * hd / tp, float(arch.hidden))
    gate_up = (float(arch.hidden), 2.0 * arch.intermediate / tp)
    down = (arch.intermediate / tp, float(arch.hidden))
    dense = [qkv, o_proj] if arch.is_moe else [qkv, o_proj, gate_up, down]
    m, g_dense = gemm_curve(tables, dense, hw.peak_flops)
    g_dense = g_dense * arch.layers
    _, g_lm = gemm_curve(tables, [(float(arch.hidden), arch.vocab / tp)], hw.peak_flops)
    if arch.is_moe:
        _, g_exp = gemm_curve(tables, [gate_up, down], hw.peak_flops)
        g_exp = g_exp * arch.layers
    else:
        g_exp = np.zeros_like(m)
    dkey, dscale = _attn_key(tables.decode, h, kv, hd, tp)
    b, lv, dt = tables.decode[dkey]
    pkey, pscale = _attn_key(tables.prefill, h, kv, hd, None)
    s, pt = tables.prefill[pkey]
    header = [1.0, m.size, b.size, lv.size, s.size]
    parts = [header, m, g_dense, g_exp, g_lm, b, lv, (dt * dscale * b_scale).ravel(),
             s, pt * pscale / tp * f_scale]
    return np.concatenate([np.asarray(p, dtype=np.float64) for p in parts])
