"""LLM replies paid for before a kill are journaled and not asked for again on resume
(issue 17: "the replies of a partial generation are paid for and lost")."""

from __future__ import annotations

import numpy as np
from llm_server import LLMServer, good_responder, make_parent

from evolve.archive import Archive
from evolve.config.llm import LLMConfig
from evolve.operators.llm.operator import LLMOperator
from evolve.search.journal import Journal


def _config(server: LLMServer) -> LLMConfig:
    return LLMConfig(model="test-model", base_url=server.base_url,
                     api_key_env="EVOLVE_TEST_NO_SUCH_KEY", timeout_s=5.0, retries=1,
                     backoff_base_s=0.01, backoff_cap_s=0.05, concurrency=3,
                     crossover_prob=0.0)


def _propose(server: LLMServer, journal: Journal) -> list:
    op = LLMOperator(_config(server))
    op.attach_journal(journal)
    parents = [make_parent()]
    try:
        return op.propose(parents, parents, np.random.default_rng(5), 3)
    finally:
        op.close()


def test_journaled_exchanges_are_served_on_resume_with_the_same_records(tmp_path):
    with LLMServer(good_responder, lifetime_s=30) as server, \
            Archive(tmp_path / "j.db") as ar:
        rid = ar.create_run(1, {}, {}, None, lock=True)
        first = Journal(ar, rid)
        first.generation = 4
        before = _propose(server, first)
        assert len(server.requests) == 3 and first.writes == 3
        again = Journal(ar, rid)  # a resumed process reads the journal of generation 4
        again.generation = 4
        after = _propose(server, again)
        assert len(server.requests) == 3  # nothing asked (or paid for) twice
        assert again.hits == 3
        strip = lambda c: {k: v for k, v in c.items() if k != "latency_s"}  # noqa: E731
        assert [strip(p.llm_call) for p in after] == [strip(p.llm_call) for p in before]
        assert [p.source for p in after] == [p.source for p in before]
        assert all(p.llm_call["cached"] is False for p in after)  # accounted as paid once
        other = Journal(ar, rid)  # another generation's requests are not served from it
        other.generation = 5
        _propose(server, other)
        assert len(server.requests) == 6
