"""Cassette record/replay: replay with the server gone reproduces the recorded proposals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from llm_server import LINEAR, LLMServer, Reply, fenced, good_responder, make_parent

from evolve.config.llm import LLMConfig
from evolve.operators.llm.cassette import (
    Cassette,
    CassetteError,
    CassetteMiss,
    canonical_request,
    request_hash,
)
from evolve.operators.llm.endpoint import Exchange
from evolve.operators.llm.operator import LLMOperator

# A complete stored exchange (loading checks every field of it).
EXCHANGE = Exchange("ok", "x", "stop", 3, 1, 0.5, 1, None).to_dict()


def config(base_url: str, cassette: Path, mode: str, **kw) -> LLMConfig:
    return LLMConfig(model="test-model", base_url=base_url, api_key_env="EVOLVE_TEST_NO_KEY",
                     timeout_s=5.0, retries=1, backoff_base_s=0.01, backoff_cap_s=0.02,
                     concurrency=3, crossover_prob=0.4, cassette=str(cassette),
                     cassette_mode=mode, prices={"test-model": (3.0, 15.0)}, **kw)


@pytest.fixture(scope="module")
def parents():
    return [make_parent(), make_parent(LINEAR, loss=0.31, scale=1.2)]


def run_generations(op: LLMOperator, parents, seed: int, generations: int = 3, n: int = 3):
    rng = np.random.default_rng(seed)
    return [op.propose(parents, parents, rng, n) for _ in range(generations)]


def comparable(batches) -> list[tuple]:
    """Everything a replay must reproduce (billing fields differ by design)."""
    out = []
    for batch in batches:
        for p in batch:
            call = {k: v for k, v in (p.llm_call or {}).items() if k not in ("cached", "cost_usd")}
            out.append((p.source, p.operator, p.parent_ids, p.error, json.dumps(call,
                                                                                 sort_keys=True)))
    return out


def test_record_then_replay_without_server(tmp_path, parents):
    cassette = tmp_path / "run.cassette.jsonl"

    def responder(req, n):  # mixed outcomes, all of which must replay
        seed = int(req["seed"])
        if seed % 5 == 0:
            return Reply(content="no program today")
        return good_responder(req, n)

    with LLMServer(responder, lifetime_s=30) as server:
        rec = LLMOperator(config(server.base_url, cassette, "record"))
        recorded = run_generations(rec, parents, seed=11)
        rec.close()
        n_requests = len(server.requests)
    lines = cassette.read_text().splitlines()
    assert len(lines) == n_requests == 9
    assert rec.usage.cost_usd > 0

    # The server is gone: replay must not need it.
    rep = LLMOperator(config("http://127.0.0.1:9/v1", cassette, "replay"))
    replayed = run_generations(rep, parents, seed=11)
    assert comparable(replayed) == comparable(recorded)
    calls = [p.llm_call for b in replayed for p in b]
    assert all(c["cached"] and c["cost_usd"] == 0.0 for c in calls)
    assert all(c["recorded_cost_usd"] > 0 for c in calls if c["status"] != "unreachable")
    assert rep.usage.cost_usd == 0.0 and rep.usage.cached_calls == 9
    # Budgets see the recorded usage, so a replay stops where the recorded run stopped.
    assert rep.usage.counted_tokens == rec.usage.counted_tokens
    assert rep.usage.counted_cost_usd == pytest.approx(rec.usage.counted_cost_usd)


def test_replay_reproduces_failures_and_fallback(tmp_path, parents):
    cassette = tmp_path / "dying.jsonl"
    server = LLMServer(good_responder, lifetime_s=30).start()
    rec = LLMOperator(config(server.base_url, cassette, "record"))
    rng = np.random.default_rng(5)
    recorded = [rec.propose(parents, [], rng, 2)]
    server.stop()
    recorded += [rec.propose(parents, [], rng, 2), rec.propose(parents, [], rng, 2)]
    assert rec.fallen_back and recorded[2][0].operator.startswith("offline:")

    rep = LLMOperator(config("http://127.0.0.1:9/v1", cassette, "replay"))
    rng = np.random.default_rng(5)
    replayed = [rep.propose(parents, [], rng, 2) for _ in range(3)]
    assert rep.fallen_back
    assert comparable(replayed) == comparable(recorded)


def test_replay_missing_key_is_a_clear_error(tmp_path, parents):
    cassette = tmp_path / "short.jsonl"
    with LLMServer(good_responder, lifetime_s=30) as server:
        run_generations(LLMOperator(config(server.base_url, cassette, "record")), parents, 1, 1)
    rep = LLMOperator(config("http://127.0.0.1:9/v1", cassette, "replay"))
    with pytest.raises(CassetteMiss) as info:
        run_generations(rep, parents, seed=2, generations=1)  # other seed: other requests
    msg = str(info.value)
    assert str(cassette) in msg and info.value.request_hash in msg
    assert len(info.value.request_hash) == 64


def test_replay_needs_the_file(tmp_path):
    with pytest.raises(CassetteError, match="file not found"):
        Cassette(tmp_path / "nope.jsonl", "replay")


def test_corrupt_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    cas = Cassette(path, "record")
    req = canonical_request("m", [{"role": "user", "content": "hi"}], 0.5, 1, 10, "v")
    cas.put(request_hash(req), req, EXCHANGE)
    with open(path, "a") as fh:
        fh.write('{"format": 1, "hash": "abc", "request": {"model"\n')
    with pytest.raises(CassetteError) as info:
        Cassette(path, "replay")
    assert f"{path}:2: not a JSON object (truncated?): " in str(info.value)
    assert "\n" not in str(info.value)


def test_tampered_line_is_detected(tmp_path):
    path = tmp_path / "tampered.jsonl"
    cas = Cassette(path, "record")
    req = canonical_request("m", [{"role": "user", "content": "hi"}], 0.5, 1, 10, "v")
    cas.put(request_hash(req), req, EXCHANGE)
    path.write_text(path.read_text().replace('"hi"', '"ho"'))
    with pytest.raises(CassetteError, match=r"tampered.jsonl:1: .*hash does not match"):
        Cassette(path, "replay")


def test_request_hash_is_canonical():
    a = canonical_request("m", [{"content": "x", "role": "user"}], 0.7, 3, 100, "v1")
    b = canonical_request("m", [{"role": "user", "content": "x"}], 0.7, 3, 100, "v1")
    assert request_hash(a) == request_hash(b)
    for changed in (canonical_request("m", [{"role": "user", "content": "x"}], 0.7, 4, 100, "v1"),
                    canonical_request("m", [{"role": "user", "content": "x"}], 0.7, 3, 100, "v2"),
                    canonical_request("m2", [{"role": "user", "content": "x"}], 0.7, 3, 100, "v1"),
                    canonical_request("m", [{"role": "user", "content": "x"}], 0.8, 3, 100, "v1")):
        assert request_hash(changed) != request_hash(a)


def test_record_appends_one_fsynced_line_per_exchange(tmp_path, parents):
    path = tmp_path / "append.jsonl"
    with LLMServer(lambda r, n: Reply(content=fenced("def step_time(f, c):\n    return 1.0")),
                   lifetime_s=30) as server:
        op = LLMOperator(config(server.base_url, path, "record"))
        op.propose(parents, [], np.random.default_rng(0), 2)
        assert len(path.read_text().splitlines()) == 2
        op2 = LLMOperator(config(server.base_url, path, "record"))  # appends, validates file
        op2.propose(parents, [], np.random.default_rng(1), 2)
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(entries) == 4 and len(Cassette(path, "replay")) == 4
    for e in entries:
        assert e["hash"] == request_hash(e["request"])
        assert set(e["request"]) == {"model", "messages", "temperature", "seed", "max_tokens",
                                     "template_version"}
