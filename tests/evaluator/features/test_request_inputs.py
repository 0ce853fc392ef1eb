"""What `queueing_time` reads of a request: the request and its server, one row per
glossary `REQUEST_FIELDS` entry, the server's rows from the same architecture vector the
step features use."""

from __future__ import annotations

import numpy as np

from evaluator.api import REQUEST_FIELD_NAMES, request_inputs
from evaluator.features.components import compute_features
from evaluator.features.glossary import FEATURE_INDEX, N_STATS, STAT_INDEX


def test_rows_follow_the_glossary_and_weight_us_is_a_full_weight_read(refreshed):
    by_model = {sc.model: sc for sc in refreshed.scenarios}
    for name in ("llama-2-7b", "mixtral-8x7b"):
        sc = by_model[name]
        R = request_inputs(sc.input_tokens, sc.output_tokens, sc.arch_vector)
        assert R.shape == (len(REQUEST_FIELD_NAMES), sc.n_requests) and R.dtype == np.float64
        row = dict(zip(REQUEST_FIELD_NAMES, R, strict=True))
        assert np.array_equal(row["input_tokens"], sc.input_tokens)
        assert np.array_equal(row["output_tokens"], sc.output_tokens)
        assert np.all(row["layers"] == sc.arch.layers) and np.all(row["tp"] == sc.server.tp)
        assert np.all(row["is_moe"] == (1.0 if sc.arch.n_experts > 1 else 0.0))
        # a step whose tokens hit every expert reads every weight once: weight_read then
        # equals weight_us (dense: any non-empty step)
        stats = np.zeros((N_STATS, 1))
        stats[STAT_INDEX["n_decode"], 0] = stats[STAT_INDEX["decode_tokens"], 0] = 4096.0
        weight_read = compute_features(stats, sc.arch_vector)[FEATURE_INDEX["weight_read"], 0]
        assert np.allclose(row["weight_us"], weight_read, rtol=1e-9)
    us = {n: request_inputs(by_model[n].input_tokens[:1], by_model[n].output_tokens[:1],
                            by_model[n].arch_vector)[2, 0] for n in ("llama-2-7b",
                                                                       "mixtral-8x7b")}
    assert 3500.0 < us["llama-2-7b"] < 4500.0  # 6.7e9 params * 2 bytes / 3.35 TB/s
    assert 12500.0 < us["mixtral-8x7b"] < 15000.0  # 46.7e9 params on 2 GPUs
