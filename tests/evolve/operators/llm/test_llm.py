"""LLMOperator against a real OpenAI-compatible server on 127.0.0.1.

The server: tests/support/llm_server.py.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from llm_server import (
    HELDOUT_RUNS,
    LINEAR,
    LLMServer,
    Reply,
    fenced,
    good_responder,
    llm_config,
    make_parent,
    parent_source,
    program_for,
)

from evolve.config.llm import LLMConfig
from evolve.operators.llm.operator import (
    BudgetExhausted,
    LLMOperator,
    LLMUnavailable,
    build_llm_operator,
)
from evolve.operators.llm.prompting import (
    TEMPLATE_VERSION,
)
from evolve.program.language import parse_program

CONTRACT_KEYS = {"request_hash", "model", "template_version", "prompt_tokens",
                 "completion_tokens", "cost_usd", "latency_s", "status", "reply", "error",
                 "cached"}


def config(server: LLMServer | None, **kw) -> LLMConfig:
    return llm_config(server, **kw)


@pytest.fixture(scope="module")
def parents():
    return [make_parent(), make_parent(LINEAR, loss=0.31, scale=1.2)]


def rng(seed: int = 7) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_good_reply_gives_program_and_call_record(serve, parents):
    server = serve()
    op = build_llm_operator(config(server, prices={"test-model": (2.0, 8.0)}),
                            heldout=HELDOUT_RUNS)
    props = op.propose(parents[:1], parents[1:], rng(), 3)
    assert len(props) == 3 and len(server.requests) == 3
    for p, req in zip(props, server.requests, strict=False):
        assert p.error is None and p.source is not None
        assert p.operator == "llm:mutate" and p.parent_ids == (parents[0].program.id,)
        parse_program(p.source)  # a valid program of the language
        call = p.llm_call
        assert set(call) >= CONTRACT_KEYS
        assert call["status"] == "ok" and call["cached"] is False
        assert call["template_version"] == TEMPLATE_VERSION and call["model"] == "test-model"
        assert call["prompt_tokens"] > 100 and call["completion_tokens"] > 10
        want = (call["prompt_tokens"] * 2.0 + call["completion_tokens"] * 8.0) / 1e6
        assert call["cost_usd"] == pytest.approx(want)
        assert req["temperature"] == 0.8 and req["max_tokens"] == 4096
        assert isinstance(req["seed"], int)
    # Results are in request order even though they ran concurrently: each proposal is the
    # program the server generated for the seed of that proposal's own request.
    seeds = sorted(p.llm_call["seed"] for p in props)
    assert sorted(int(r["seed"]) for r in server.requests) == seeds
    for p in props:
        assert p.source.strip().startswith('"""') and f"seed {p.llm_call['seed']})" in p.source
    u = op.usage
    assert u.calls == 3 and u.cached_calls == 0 and u.failed_calls == 0
    assert u.cost_usd == pytest.approx(sum(p.llm_call["cost_usd"] for p in props))
    op.close()


def test_same_rng_same_requests(serve, parents):
    server = serve()
    a = LLMOperator(config(server, crossover_prob=0.5)).propose(parents, parents, rng(3), 4)
    b = LLMOperator(config(server, crossover_prob=0.5)).propose(parents, parents, rng(3), 4)
    c = LLMOperator(config(server, crossover_prob=0.5)).propose(parents, parents, rng(4), 4)
    key = [(p.operator, p.parent_ids, p.llm_call["request_hash"]) for p in a]
    assert key == [(p.operator, p.parent_ids, p.llm_call["request_hash"]) for p in b]
    assert key != [(p.operator, p.parent_ids, p.llm_call["request_hash"]) for p in c]
    assert [p.source for p in a] == [p.source for p in b]


def test_replies_per_prompt_share_a_prompt_and_are_sent_back_to_back(serve, parents):
    """Two replies per prompt (the default): requests 0 and 1 ask the same prompt with their
    own seeds, one after the other (concurrency 1, the local server's), then 2 a new one."""
    server = serve()
    three = [*parents, make_parent(LINEAR, loss=0.5, scale=2.0)]
    props = LLMOperator(config(server, concurrency=1, crossover_prob=0.0)).propose(
        three, [], rng(), 3)
    sent = server.requests
    assert [r["messages"] for r in sent[:2]] == [sent[0]["messages"]] * 2
    assert sent[2]["messages"] != sent[0]["messages"]  # parents[2]'s prompt
    assert len({r["seed"] for r in sent}) == 3
    assert len({p.llm_call["request_hash"] for p in props}) == 3
    assert props[0].parent_ids == props[1].parent_ids != props[2].parent_ids
    assert props[0].source != props[1].source  # each seed its own reply
    one = LLMOperator(config(server, replies_per_prompt=1, crossover_prob=0.0)).propose(
        three, [], rng(), 2)
    assert one[0].parent_ids != one[1].parent_ids  # one prompt per child


def test_crossover_uses_two_parents(serve, parents):
    server = serve()
    props = LLMOperator(config(server, crossover_prob=1.0)).propose(parents, [], rng(), 2)
    assert all(p.operator == "llm:crossover" and len(p.parent_ids) == 2 for p in props)
    user = server.requests[0]["messages"][1]["content"]
    assert "# Parent A" in user and "# Parent B" in user


def test_crossover_needs_two_distinct_programs(serve, parents):
    server = serve()
    props = LLMOperator(config(server, crossover_prob=1.0)).propose(
        [parents[0], parents[0]], [], rng(), 2)
    assert [p.operator for p in props] == ["llm:mutate", "llm:mutate"]


def test_malformed_reply_is_stored_not_raised(serve, parents):
    def responder(req, n):
        if n % 3 == 0:
            return Reply(content="I think you should add a term for the KV cache.")
        if n % 3 == 1:
            return Reply(content=fenced("def step_time(f, c):\n    return (f.pf_gemm +\n"))
        return Reply(content=None)

    server = serve(responder)
    op = LLMOperator(config(server, concurrency=1))
    props = op.propose(parents[:1], [], rng(), 3)
    assert [p.source for p in props] == [None, None, None]
    errors = [p.error for p in props]
    assert "no ```python block" in errors[0]
    assert "not valid Python" in errors[1]
    assert errors[2] == "empty reply"
    assert all(p.llm_call["status"] == "no_program" for p in props)
    assert props[0].llm_call["reply"].startswith("I think")
    assert not op.fallen_back  # the endpoint works; only the replies are bad


def test_search_replace_diff_reply(serve, parents):
    def responder(req, n):
        line = "    return c.overhead + maximum(compute, memory) + {}f.tp_allreduce\n"
        return Reply(content=f"Small change:\n<<<<<<< SEARCH\n{line.format('')}=======\n"
                             f"{line.format('2.0 * ')}>>>>>>> REPLACE\n")

    server = serve(responder)
    (p,) = LLMOperator(config(server)).propose(parents[:1], [], rng(), 1)
    assert p.error is None
    assert "2.0 * f.tp_allreduce" in p.source
    assert parse_program(p.source).id != parents[0].program.id
    assert parent_source(server.requests[0]).strip() == parents[0].program.source.strip()


def test_timeout_is_final_not_retried(serve, parents):
    server = serve(lambda req, n: Reply(content=fenced(program_for(1)), delay_s=3.0))
    op = LLMOperator(config(server, timeout_s=0.3, retries=4))
    t0 = time.monotonic()
    (p,) = op.propose(parents[:1], [], rng(), 1)
    assert time.monotonic() - t0 < 1.5
    assert p.source is None and "timeout" in p.error and "not retried" in p.error
    assert p.llm_call["status"] == "unreachable" and p.llm_call["attempts"] == 1
    assert len(server.requests) == 1


def test_429_retry_after_is_honoured(serve, parents):
    def responder(req, n):
        if n == 0:
            return Reply(status=429, headers={"Retry-After": "0.2"})
        return good_responder(req, n)

    server = serve(responder)
    # Backoff without Retry-After would be 3 s: a quick success proves Retry-After was used.
    op = LLMOperator(config(server, backoff_base_s=3.0, backoff_cap_s=3.0, concurrency=1))
    t0 = time.monotonic()
    (p,) = op.propose(parents[:1], [], rng(), 1)
    elapsed = time.monotonic() - t0
    assert p.error is None and p.llm_call["attempts"] == 2
    assert 0.2 <= elapsed < 2.0 and p.llm_call["latency_s"] >= 0.2


def test_500s_are_retried(serve, parents):
    def responder(req, n):
        if n == 0:
            return Reply(status=503, headers={"Retry-After": "0.1"})
        return Reply(status=500) if n < 3 else good_responder(req, n)

    server = serve(responder)
    op = LLMOperator(config(server, retries=3, concurrency=1))
    (p,) = op.propose(parents[:1], [], rng(), 1)
    assert p.error is None and p.llm_call["attempts"] == 4 and len(server.requests) == 4
    assert p.llm_call["latency_s"] >= 0.1


def test_5xx_until_retries_run_out(serve, parents):
    server = serve(lambda req, n: Reply(status=502))
    op = LLMOperator(config(server, retries=2, on_failure="stop"))
    with pytest.raises(LLMUnavailable, match="HTTP 502"):
        op.propose(parents[:1], [], rng(), 1)
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(serve, parents):
    server = serve(lambda req, n: Reply(status=400))
    op = LLMOperator(config(server, retries=3))
    (p,) = op.propose(parents[:1], [], rng(), 1)
    assert p.llm_call["status"] == "api_error" and "HTTP 400" in p.error
    assert len(server.requests) == 1 and not op.fallen_back


def test_non_json_body_is_an_error(serve, parents):
    server = serve(lambda req, n: Reply(raw_body="<html>gateway</html>"))
    (p,) = LLMOperator(config(server)).propose(parents[:1], [], rng(), 1)
    assert p.source is None and p.llm_call["status"] == "api_error"


def test_missing_usage_is_estimated(serve, parents):
    server = serve(lambda req, n: Reply(content=fenced(program_for(n)), usage=False))
    (p,) = LLMOperator(config(server)).propose(parents[:1], [], rng(), 1)
    assert p.error is None and p.llm_call["usage_estimated"] is True
    assert p.llm_call["prompt_tokens"] > 100


def test_server_dies_mid_run_falls_back_to_offline(serve, parents):
    server = serve()
    op = LLMOperator(config(server, retries=1, on_failure="offline"))
    first = op.propose(parents, [], rng(), 2)
    assert all(p.source for p in first)
    server.stop()
    second = op.propose(parents, [], rng(), 2)  # every request fails at the endpoint
    assert all(p.source is None and p.llm_call["status"] == "unreachable" for p in second)
    assert "connection error" in second[0].error
    assert op.fallen_back
    third = op.propose(parents, [], rng(), 2)
    assert all(p.operator.startswith("offline:") for p in third)
    assert any(p.source for p in third)


def test_server_dies_mid_run_stops_cleanly(serve, parents):
    server = serve()
    op = LLMOperator(config(server, retries=1, on_failure="stop"))
    op.propose(parents, [], rng(), 2)
    server.stop()
    with pytest.raises(LLMUnavailable, match="failed every request") as info:
        op.propose(parents, [], rng(), 2)
    assert len(info.value.proposals) == 2


def test_server_stopped_while_requests_in_flight(serve, parents):
    server = serve(lambda req, n: Reply(content=fenced(program_for(n)), delay_s=5.0))
    threading.Timer(0.3, server.stop).start()
    op = LLMOperator(config(server, retries=1, on_failure="stop"))
    t0 = time.monotonic()
    with pytest.raises(LLMUnavailable):
        op.propose(parents, [], rng(), 2)
    assert time.monotonic() - t0 < 4.0


def test_token_budget_stops_cleanly(serve, parents):
    server = serve()
    op = LLMOperator(config(server, max_total_tokens=1000))
    op.propose(parents, [], rng(), 2)  # spends > 1000 tokens; the batch itself completes
    assert op.usage.counted_tokens > 1000
    with pytest.raises(BudgetExhausted, match="token budget"):
        op.propose(parents, [], rng(), 2)
    assert len(server.requests) == 2


def test_cost_budget_stops_cleanly(serve, parents):
    server = serve()
    op = LLMOperator(config(server, prices={"test-model": (1000.0, 1000.0)}, max_cost_usd=1.0))
    op.propose(parents, [], rng(), 1)
    with pytest.raises(BudgetExhausted, match="cost budget"):
        op.propose(parents, [], rng(), 1)


def test_prompt_too_large_is_a_proposal_error(serve, parents):
    server = serve()
    (p,) = LLMOperator(config(server, prompt_token_cap=500)).propose(parents[:1], [], rng(), 1)
    assert p.source is None and "prompt_token_cap is 500" in p.error and p.llm_call is None
    assert server.requests == []


# ---- evolve llm-check --------------------------------------------------------------------

def test_llm_check_prints_latency_reply_and_usage(serve, capsys):
    from evolve.cli.main import main

    server = serve(lambda req, n: Reply(content="pong", prompt_tokens=12, completion_tokens=1))
    rc = main(["llm-check", "--llm", "test-model", "--llm-base-url", server.base_url,
               "--api-key-env", "EVOLVE_TEST_NO_SUCH_KEY"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "latency" in out and "'pong'" in out and "12 prompt + 1 completion" in out
    assert server.requests[0]["max_tokens"] == 16


def test_llm_check_unreachable_is_one_line_and_nonzero(serve, capsys):
    from evolve.cli.main import main

    server = serve()
    server.stop()
    rc = main(["llm-check", "--llm", "test-model", "--llm-base-url", server.base_url,
               "--timeout", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "connection error" in err and server.base_url in err


def test_llm_check_json_answers_on_stdout_also_on_failure(serve, capsys):
    """A script reading ``--json`` gets an object either way: ok true or ok false + error."""
    import json

    from evolve.cli.main import main

    server = serve(lambda req, n: Reply(content="pong", prompt_tokens=12, completion_tokens=1))
    args = ["llm-check", "--llm", "test-model", "--llm-base-url", server.base_url, "--json"]
    assert main(args) == 0
    good = json.loads(capsys.readouterr().out)
    assert good["ok"] is True and good["reply"] == "pong" and good["prompt_tokens"] == 12
    server.stop()
    assert main([*args, "--timeout", "1"]) == 2
    captured = capsys.readouterr()
    bad = json.loads(captured.out)
    assert bad["ok"] is False and "connection error" in bad["error"]
    assert bad["error"] in captured.err and captured.err.count("\n") == 1


# ---- configuration -----------------------------------------------------------------------

def test_no_seed_sent_when_disabled(serve, parents):
    server = serve()
    LLMOperator(config(server, send_seed=False, replies_per_prompt=1)).propose(
        parents[:1], [], rng(), 1)
    assert "seed" not in server.requests[0]


def test_config_checks_and_normalises():
    cfg = LLMConfig.from_dict({"model": "m", "prices": {"m": [1, 2.5]}})
    assert cfg.prices == {"m": (1.0, 2.5)} and cfg.cost_usd(1_000_000, 2_000_000) == 6.0
    assert LLMConfig.from_dict(cfg.to_dict()) == cfg
    for bad, match in (({"on_failure": "retry"}, "on_failure"),
                       ({"cassette_mode": "replay"}, "needs a cassette path"),
                       ({"prices": {"m": [1.0]}}, r"prices\['m'\]"),
                       ({"concurrency": 0}, "concurrency"),
                       ({"replies_per_prompt": 0}, r"replies_per_prompt must be in \[1, 8\]"),
                       ({"replies_per_prompt": 9}, r"replies_per_prompt must be in \[1, 8\]"),
                       ({"send_seed": False}, "replies_per_prompt > 1 needs send_seed"),
                       ({"base_url": "htp:/nope"}, "base_url must be an http"),
                       ({"base_url": ""}, "base_url must be an http"),
                       ({"base_url": "http://127.0.0.1:99999/v1"}, "Port out of range"),
                       ({"modle": "x"}, "unknown key")):
        with pytest.raises(ValueError, match=match):
            LLMConfig.from_dict(bad)
    assert LLMConfig(api_key_env="EVOLVE_TEST_NO_SUCH_KEY").api_key() == "EMPTY"
    assert LLMConfig(model="local", base_url="").model == "local"  # its server sets the URL
