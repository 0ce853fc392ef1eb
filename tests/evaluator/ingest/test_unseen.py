"""Runs of a model nobody measured: the measured workloads, re-served by another model,
with every measurement dropped (evaluator/ingest/unseen.py)."""

from __future__ import annotations

import numpy as np
import pytest

from evaluator.api import DataError, unseen_scenarios


def test_each_workload_is_served_by_the_new_model_without_measurements(all_scenarios,
                                                                        data_path):
    sources = [s for s in all_scenarios if s.model == "llama-2-70b"]
    new = unseen_scenarios(sources, data_path / "models" / "Llama-2-7b-hf", tp=1,
                           kv_blocks=20000, name="seven", data=data_path)
    assert sorted(s.workload for s in new) == sorted({s.workload for s in sources})
    by_name = {s.name: s for s in sources}
    for sc in new:
        src = by_name[sc.meta["workload_of"]]
        assert sc.name == f"seven-{sc.workload}" and sc.model == "seven"
        assert sc.split == "unseen" and src.workload == sc.workload
        assert (sc.arch.layers, sc.arch.hidden, sc.server.tp, sc.server.kv_blocks) == \
            (32, 4096, 1, 20000)
        assert sc.server.max_num_seqs == src.server.max_num_seqs
        # the workload is the source's, arrival for arrival and prompt for prompt
        assert np.array_equal(sc.arrival_us, src.arrival_us)
        assert np.array_equal(sc.input_tokens, src.input_tokens)
        assert np.array_equal(sc.prompt_id, src.prompt_id)
        # the other model's results are gone; the kernel curves are the new shapes'
        assert np.isnan(sc.measured.e2e_s).all() and not sc.measured.failed.any()
        assert sc.measured.summary == {}
        assert not np.array_equal(sc.arch_vector, src.arch_vector)


def test_bad_servers_are_refused_naming_the_field(all_scenarios, data_path):
    sources = [s for s in all_scenarios if s.model == "llama-2-7b"]
    cfg = data_path / "models" / "CodeLlama-34b-Instruct-hf"
    with pytest.raises(DataError, match=r"8 KV heads\) do not split over --tp 3"):
        unseen_scenarios(sources, cfg, tp=3, kv_blocks=20000, name="x", data=data_path)
    with pytest.raises(DataError, match=r"--kv-blocks 10: .*fewer than max_model_len"):
        unseen_scenarios(sources, cfg, tp=2, kv_blocks=10, name="x", data=data_path)
    with pytest.raises(DataError, match=r"nope: not found \(the model's config.json"):
        unseen_scenarios(sources, cfg / "nope", tp=2, kv_blocks=20000, name="x",
                         data=data_path)
