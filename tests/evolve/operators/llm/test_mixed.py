"""Mixed operators (issue 59): which operator makes each child, drawn from the run seed; the
LLM batch of the next generation sent ahead (overlap) and applied in request order.

Against the real OpenAI-compatible test server (tests/support/llm_server.py), never a mock.
"""

from __future__ import annotations

import numpy as np
import pytest
from llm_server import LINEAR, Reply, fenced, llm_config, make_parent, program_for

from evolve.config.schema import Config
from evolve.operators.llm.mixed import MixedOperator, build_mixed_operator, primaries_first, split
from evolve.operators.llm.operator import LLMOperator
from evolve.operators.offline.operator import OfflineOperator
from evolve.search.rng import PURPOSE_OPERATOR, generation_rng


def parents() -> list:
    return [make_parent(), make_parent(LINEAR, loss=0.3)]


def test_the_split_depends_on_the_seed_and_generation_only():
    a = split(generation_rng(7, 3, PURPOSE_OPERATOR), 8, 0.25)
    b = split(generation_rng(7, 3, PURPOSE_OPERATOR), 8, 0.25)
    assert a[0] == b[0] and a[1] == b[1]
    assert a[2].integers(1 << 30) == b[2].integers(1 << 30)
    assert sorted(a[0] + a[1]) == list(range(8))
    other = [split(generation_rng(7, g, PURPOSE_OPERATOR), 8, 0.25)[0] for g in range(1, 9)]
    assert len({tuple(o) for o in other}) > 1  # generations differ
    share = np.mean([len(o) for o in other]) / 8
    assert 0.05 < share < 0.5
    assert split(np.random.default_rng(1), 8, 0.0)[0] == []
    assert split(np.random.default_rng(1), 8, 1.0)[0] == list(range(8))


def test_the_llm_makes_the_share_of_a_generation_rounded_up_or_down():
    """A steady load on the model: 0.25 of 10 children is 2 or 3, never 0 or 5, and 2.5 on
    average over generations; the positions differ between generations."""
    draws = [split(generation_rng(7, g, PURPOSE_OPERATOR), 10, 0.25)[0] for g in range(400)]
    counts = [len(d) for d in draws]
    assert set(counts) == {2, 3}
    assert np.mean(counts) == pytest.approx(2.5, abs=0.15)
    assert len({tuple(d) for d in draws}) > 100
    assert {len(split(np.random.default_rng(s), 8, 0.5)[0]) for s in range(50)} == {4}


def test_primaries_first_keeps_each_childs_primary_parent():
    ps = [make_parent(scale=s) for s in (1.0, 1.1, 1.2)]
    out = primaries_first(ps, [1, 4])
    assert out[0] is ps[1] and out[1] is ps[1]  # child 4: parents[4 % 3]
    assert {id(p) for p in out} == {id(p) for p in ps}


def test_mixed_children_are_reproducible_and_say_their_operator(serve):
    server = serve(lambda req, n: Reply(content=fenced(program_for(int(req["seed"])))))
    runs = []
    for _ in range(2):
        # one reply per prompt: with two, an LLM child asked its predecessor's prompt
        # has its predecessor's parent (test_llm.py)
        op = MixedOperator(LLMOperator(llm_config(server, replies_per_prompt=1)),
                           OfflineOperator(), 0.5, overlap=False)
        runs.append(op.propose(parents(), [], generation_rng(7, 1, PURPOSE_OPERATOR), 8))
    a, b = runs
    assert [p.operator for p in a] == [p.operator for p in b]
    assert [p.source for p in a] == [p.source for p in b]
    llm_idx, _, _, _ = split(generation_rng(7, 1, PURPOSE_OPERATOR), 8, 0.5)
    assert [i for i, p in enumerate(a) if p.operator.startswith("llm:")] == llm_idx
    assert all(p.operator.startswith("offline:") for i, p in enumerate(a) if i not in llm_idx)
    assert len(server.requests) == 2 * len(llm_idx)
    ps = parents()
    for i, p in enumerate(a):  # child i's primary parent, whichever operator made it
        assert p.parent_ids[0] == ps[i % 2].program.id


def test_overlap_sends_the_next_batch_early_and_applies_it_in_request_order(serve):
    # the first request of a batch answers last: results must still come in request order
    def slow_first(req, n):
        return Reply(content=fenced(program_for(int(req["seed"]))),
                     delay_s=0.4 if n % 3 == 0 else 0.0)

    server = serve(slow_first)
    ahead = MixedOperator(LLMOperator(llm_config(server)), OfflineOperator(), 0.6)
    rng2 = generation_rng(7, 2, PURPOSE_OPERATOR)
    ahead.prefetch(parents(), [], rng2, 8)  # generation 2's requests, from generation 1
    sent_early = len(server.requests)
    got = ahead.propose(parents(), [], generation_rng(7, 2, PURPOSE_OPERATOR), 8)
    assert ahead.prefetched == 1
    n_llm = sum(p.operator.startswith("llm:") for p in got)
    assert n_llm and len(server.requests) == n_llm  # nothing asked twice
    assert sent_early <= n_llm
    # the same plans without overlap: the same children, in the same order
    plain = MixedOperator(LLMOperator(llm_config(server)), OfflineOperator(), 0.6,
                          overlap=False)
    again = plain.propose(parents(), [], generation_rng(7, 2, PURPOSE_OPERATOR), 8)
    assert [(p.operator, p.source) for p in got] == [(p.operator, p.source) for p in again]
    calls = [p.llm_call["seed"] for p in got if p.llm_call]
    assert calls == [p.llm_call["seed"] for p in again if p.llm_call]
    ahead.close()


def test_two_generations_ahead_each_collect_their_own_batch(serve):
    server = serve(lambda req, n: Reply(content=fenced(program_for(int(req["seed"])))))
    ahead = MixedOperator(LLMOperator(llm_config(server)), OfflineOperator(), 0.6)
    for g in (2, 3, 2):  # generation 2 asked for twice: planned and sent once
        ahead.prefetch(parents(), [], generation_rng(7, g, PURPOSE_OPERATOR), 8, generation=g)
    n_llm = [len(split(generation_rng(7, g, PURPOSE_OPERATOR), 8, 0.6)[0]) for g in (2, 3)]
    got = {g: ahead.propose(parents(), [], generation_rng(7, g, PURPOSE_OPERATOR), 8,
                            generation=g) for g in (3, 2)}  # collected in any order
    assert ahead.prefetched == 2 and len(server.requests) == sum(n_llm)
    plain = MixedOperator(LLMOperator(llm_config(server)), OfflineOperator(), 0.6,
                          overlap=False)
    for g in (2, 3):  # the same children as asking at the generation, from these parents
        again = plain.propose(parents(), [], generation_rng(7, g, PURPOSE_OPERATOR), 8)
        assert [(p.operator, p.source) for p in got[g]] == [
            (p.operator, p.source) for p in again]
    ahead.close()


def test_no_batch_is_sent_ahead_without_overlap_or_llm_children(serve):
    server = serve()
    op = MixedOperator(LLMOperator(llm_config(server)), OfflineOperator(), 0.0)
    op.prefetch(parents(), [], generation_rng(7, 2, PURPOSE_OPERATOR), 8)
    assert server.requests == []
    got = op.propose(parents(), [], generation_rng(7, 2, PURPOSE_OPERATOR), 8)
    assert all(p.operator.startswith("offline:") for p in got)


def test_the_llm_alone_without_overlap_is_the_old_operator(serve):
    server = serve()
    llm = LLMOperator(llm_config(server))
    assert build_mixed_operator(llm, OfflineOperator(), 1.0, False) is llm
    assert isinstance(build_mixed_operator(llm, OfflineOperator(), 1.0, True), MixedOperator)


def test_runs_stored_before_mixing_load_as_the_llm_alone():
    stored = Config().stored_dict()
    assert "llm_share" not in stored["operator"]  # an offline run stores what it did
    stored["operator"] = {"kind": "llm"}
    stored["llm"]["model"] = "m"
    cfg = Config.from_dict(stored)
    assert (cfg.operator.llm_share, cfg.operator.repairs, cfg.operator.overlap) == (1.0, 0, False)
    stored["operator"] = {"kind": "llm", "llm_share": 0.25, "overlap": True}  # before lookahead
    assert Config.from_dict(stored).operator.lookahead == 1  # one batch ahead, as it ran
    assert "replies_per_prompt" not in stored["llm"]  # nor [llm] keys of LLM runs
    assert Config.from_dict(stored).llm.replies_per_prompt == 1  # a prompt per child
    fresh = Config()
    fresh.operator.kind = "llm"
    assert fresh.stored_dict()["operator"]["llm_share"] == pytest.approx(0.25)
    assert fresh.stored_dict()["operator"]["lookahead"] == 1
    assert fresh.stored_dict()["llm"]["replies_per_prompt"] == 2


def test_mixed_falls_back_only_after_consecutive_failed_batches(serve):
    from evolve.operators.llm.mixed import FAIL_BATCHES

    server = serve(lambda req, n: Reply(status=503))
    op = MixedOperator(LLMOperator(llm_config(server, retries=0)), OfflineOperator(), 1.0,
                       overlap=False)
    for g in range(1, FAIL_BATCHES):
        op.propose(parents(), [], generation_rng(7, g, PURPOSE_OPERATOR), 2)
        assert not op.fallen_back
    op.propose(parents(), [], generation_rng(7, FAIL_BATCHES, PURPOSE_OPERATOR), 2)
    assert op.fallen_back
