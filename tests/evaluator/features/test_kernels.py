"""Measured kernel tables: cleaning, interpolation rules, held-out error, the fallback."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evaluator.data.kernel_tables import KernelTables, suffix_min
from evaluator.data.scenarios import DataError
from evaluator.features.components import ARCH_FIELDS, compute_features
from evaluator.features.glossary import FEATURE_INDEX, N_STATS, STAT_INDEX
from evaluator.features.kernel_interp import bilinear, interp_loglog, kernel_times
from evaluator.features.kernel_loo import leave_one_out

REASONING_7B = "20260217-170634-llama-2-7b-tp1-reasoning"


def _write_tables(root: Path, decode_rows: str, prefill_rows: str | None = None) -> Path:
    base = root / "kernels" / "bench_data"
    (base / "gemm" / "h100").mkdir(parents=True)
    (base / "mha" / "decode" / "h100").mkdir(parents=True)
    (base / "mha" / "prefill" / "h100").mkdir(parents=True)
    gemm = ["m,k,n,latency_us"] + [f"{m},{k},{n},{m * k * n * 2e-12 + 5:.6f}"
                                   for k in (2048, 4096) for n in (4096, 8192)
                                   for m in (8, 64, 512)]
    (base / "gemm" / "h100" / "data.csv").write_text("\n".join(gemm) + "\n")
    (base / "mha" / "decode" / "h100" / "32-32-128-tp1.csv").write_text(decode_rows)
    (base / "mha" / "prefill" / "h100" / "32-32-128.csv").write_text(
        prefill_rows or "seq_len,latency_us\n1024,40\n4096,200\n8192,800\n")
    return root


DECODE_OK = ("batch_size,kv_len,latency_us\n"
             "1,256,30\n1,512,20\n1,1024,40\n1,2048,60\n"   # 30 is a warm-up outlier
             "8,256,50\n8,512,90\n")                        # 1,024+ not measured


def test_cleaning_and_gap_fill(tmp_path):
    tables = KernelTables.load(_write_tables(tmp_path, DECODE_OK))
    assert tables is not None
    b, lv, t = tables.decode["32-32-128-tp1"]
    assert b.tolist() == [1, 8] and lv.tolist() == [256, 512, 1024, 2048]
    assert t[0].tolist() == [20, 20, 40, 60]        # suffix minimum removes the outlier
    assert t[1].tolist() == [50, 90, 170, 330]      # extended linearly from the last two
    assert tables.decode_measured["32-32-128-tp1"].tolist() == [[True] * 4,
                                                                [True, True, False, False]]
    assert np.all(np.diff(suffix_min(np.array([5.0, 3.0, 4.0, 9.0]))) >= 0)


@pytest.mark.parametrize(("rows", "message"), [
    ("batch_size,latency_us\n1,20\n2,30\n", "32-32-128-tp1.csv: missing column 'kv_len'"),
    ("batch_size,kv_len,latency_us\n1,256,x\n1,512,3\n",
     "32-32-128-tp1.csv: row 2, field 'latency_us': not a number"),
    ("batch_size,kv_len,latency_us\n1,256,-4\n1,512,3\n",
     "32-32-128-tp1.csv: row 2, field 'latency_us': must be > 0"),
    ("batch_size,kv_len,latency_us\n1,256,4\n1,512,5\n8,256,7\n8,1024,9\n",
     "field 'latency_us': batch_size 8 needs"),
])
def test_bad_tables_name_file_row_and_field(tmp_path, rows, message):
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        KernelTables.load(_write_tables(tmp_path, rows))


def test_no_tables_means_roofline_fallback(tmp_path):
    assert KernelTables.load(tmp_path) is None


def test_interpolation_rules():
    x, y = np.array([8.0, 64.0, 512.0]), np.array([10.0, 20.0, 80.0])
    assert interp_loglog(x, y, 64.0, False, 1.0) == pytest.approx(20.0)
    assert interp_loglog(x, y, 1.0, False, 1.0) == 10.0                  # flat below (GEMM)
    assert interp_loglog(x, y, 4.0, True, 2.0) == pytest.approx(10.0 * 0.5 ** (1 / 3))
    assert interp_loglog(x, y, 1024.0, False, 1.0) == pytest.approx(160.0)  # linear above
    assert interp_loglog(x, y, 1024.0, True, 2.0) == pytest.approx(320.0)   # quadratic
    mid = interp_loglog(x, y, 128.0, False, 1.0)
    assert 20.0 < mid < 80.0 and mid == pytest.approx(20.0 * 4.0 ** (1 / 3))
    bx, lx = np.array([1.0, 8.0]), np.array([256.0, 512.0])
    grid = np.array([20.0, 20.0, 50.0, 90.0])
    assert bilinear(bx, lx, grid, 8.0, 1024.0) == pytest.approx(170.0)  # edge extrapolation
    assert bilinear(bx, lx, grid, 0.5, 100.0) == 20.0                   # floor: a launch


@pytest.fixture(scope="module")
def tables(data_path):
    loaded = KernelTables.load(data_path)
    assert loaded is not None
    return loaded


def test_held_out_interpolation_error(tables):
    """The figures of ``scripts/kernel_tables.py`` (docs/kernels.md), with headroom."""
    stats = {s.family: s for s in leave_one_out(tables)}
    assert set(stats) == {"gemm_m", "gemm_shape", "decode_len", "decode_batch", "prefill"}
    assert all(s.errors.size >= 15 for s in stats.values())
    assert stats["gemm_shape"].median < 0.02 and stats["gemm_shape"].worst < 0.10
    assert stats["gemm_m"].median < 0.04
    assert stats["decode_len"].median < 0.02 and stats["decode_batch"].median < 0.03
    assert stats["prefill"].median < 0.12
    assert max(s.worst for s in stats.values()) < 0.40


def _decode_stats(n: int, ctx: float) -> np.ndarray:
    stats = np.zeros((N_STATS, 1))
    stats[STAT_INDEX["n_decode"], 0] = n
    stats[STAT_INDEX["decode_tokens"], 0] = n
    stats[STAT_INDEX["dc_kv_sum"], 0] = n * ctx
    stats[STAT_INDEX["kv_max"], 0] = ctx
    return stats


def test_kernel_features_grow_with_context_and_batch(all_scenarios):
    (sc,) = [s for s in all_scenarios if s.name == REASONING_7B]
    arch = sc.arch_vector
    assert arch[len(ARCH_FIELDS)] == 1.0  # the bundled data carries tables
    k_dc, k_step = FEATURE_INDEX["k_dc_attn"], FEATURE_INDEX["k_step"]
    by_ctx = [compute_features(_decode_stats(32, c), arch)[k_dc, 0]
              for c in (128, 512, 2048, 8192, 32768, 200000)]
    assert np.all(np.diff(by_ctx) > 0)
    by_batch = [compute_features(_decode_stats(n, 2048), arch)[k_step, 0]
                for n in (1, 8, 64, 256, 1024)]
    assert np.all(np.diff(by_batch) > 0)
    # Long contexts priced at least at the roofline KV read (the tables are measured).
    roof = compute_features(_decode_stats(64, 32768), arch[:len(ARCH_FIELDS)])
    meas = compute_features(_decode_stats(64, 32768), arch)
    assert meas[k_dc, 0] >= roof[FEATURE_INDEX["kv_read"], 0] * 0.9


def test_fallback_without_tables_is_the_roofline(all_scenarios):
    sc = all_scenarios[0]
    bare = sc.arch_vector[:len(ARCH_FIELDS)]
    f = compute_features(_decode_stats(16, 1000), np.concatenate([bare, np.zeros(5)]))
    ix = FEATURE_INDEX
    assert f[ix["k_gemm"], 0] == max(f[ix["pf_gemm"], 0] + f[ix["dc_gemm"], 0],
                                     f[ix["weight_read"], 0])
    assert f[ix["k_step"], 0] == pytest.approx(
        f[ix["k_gemm"], 0] + f[ix["k_dc_attn"], 0] + f[ix["k_pf_attn"], 0])


def test_moe_experts_and_prefill_are_priced(all_scenarios):
    kb_of = {s.arch.name: s.kernels for s in all_scenarios}
    moe = next(v for k, v in kb_of.items() if "mixtral" in k.lower())
    g, _, _ = kernel_times(moe, 512.0, 1.0, 0.0, 0.0, 0.0, 32.0, 8.0, 2.0)
    g1, _, _ = kernel_times(moe, 512.0, 1.0, 0.0, 0.0, 0.0, 32.0, 1.0, 1.0)
    assert g > g1 > 0.0  # the experts' GEMMs come on top of the dense ones
    _, _, p1 = kernel_times(moe, 0.0, 0.0, 0.0, 0.0, 1024.0 ** 2 / 2, 32.0, 8.0, 2.0)
    _, _, p2 = kernel_times(moe, 0.0, 0.0, 0.0, 0.0, 4096.0 ** 2 / 2, 32.0, 8.0, 2.0)
    assert 4.0 < p2 / p1 < 16.0  # between linear and quadratic in the sequence
