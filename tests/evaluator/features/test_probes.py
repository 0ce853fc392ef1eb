"""Synthetic probe batches: the grid is what it says, and its pairs differ in one direction."""

from __future__ import annotations

import numpy as np

from evaluator.api import FEATURE_INDEX, probe_batches


def test_probe_grid_pairs_differ_in_one_direction(small_scenarios):
    probe = probe_batches(small_scenarios[0])
    f = probe.features
    assert f.shape[1] == len(probe.label) == probe.context.size
    kv, toks = f[FEATURE_INDEX["kv_sum"]], (f[FEATURE_INDEX["prefill_tokens"]]
                                            + f[FEATURE_INDEX["decode_tokens"]])
    a, b = probe.more_context.T
    assert np.all(kv[b] + f[FEATURE_INDEX["kv_max"]][b] > kv[a] + f[FEATURE_INDEX["kv_max"]][a])
    assert np.all(toks[b] == toks[a])
    a, b = probe.more_tokens.T
    assert np.all(toks[b] > toks[a])
    assert probe.context.max() >= 4000 and probe.context.min() <= 128


def test_probe_features_grow_with_context(small_scenarios):
    probe = probe_batches(small_scenarios[1])
    kv_read = probe.features[FEATURE_INDEX["kv_read"]]
    a, b = probe.more_context.T
    assert np.all(kv_read[b] >= kv_read[a])
    i = probe.label.index("decode B=128 L=4000")
    j = probe.label.index("decode B=128 L=128")
    assert kv_read[i] > 20 * kv_read[j]
