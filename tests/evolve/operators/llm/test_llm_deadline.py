"""The per-call deadline against a real HTTP server (tests/support/llm_server.py): slow, 500, 429.

Why these: a slow local model once cost 615 s per request (a 120 s timeout retried five
times). ``timeout_s`` now bounds a whole call – attempts and waits together – a timeout is
not retried, and only 429, 5xx and connection errors are.
"""

from __future__ import annotations

import numpy as np
import pytest
from llm_server import (
    LLMServer,
    Reply,
    fenced,
    good_responder,
    llm_config,
    make_parent,
    program_for,
)

from evolve.config.llm import LLMConfig
from evolve.operators.llm.operator import LLMOperator


def config(server: LLMServer, **kw) -> LLMConfig:
    return llm_config(server, **{"retries": 3, "concurrency": 2, **kw})


def propose(cfg: LLMConfig, n: int = 1):
    op = LLMOperator(cfg)
    try:
        return op, op.propose([make_parent()], [], np.random.default_rng(3), n)
    finally:
        op.close()


def test_slow_reply_costs_one_deadline_not_five(serve):
    server = serve(lambda req, n: Reply(content=fenced(program_for(n)), delay_s=4.0))
    _, (p,) = propose(config(server, timeout_s=0.5, retries=4))
    assert p.llm_call["latency_s"] < 1.5
    assert p.llm_call["attempts"] == 1 and len(server.requests) == 1
    assert "deadline" in p.error


def test_500s_retry_within_the_deadline_only(serve):
    server = serve(lambda req, n: Reply(status=500))
    # Backoff 0.4, 0.8, 1.6 s: with a 1 s deadline only the first retry fits.
    _, (p,) = propose(config(server, timeout_s=1.0, retries=3, backoff_base_s=0.4,
                             backoff_cap_s=5.0, on_failure="offline"))
    assert p.llm_call["latency_s"] < 1.0
    assert p.llm_call["attempts"] == 2 and len(server.requests) == 2
    assert "HTTP 500" in p.error and "deadline" in p.error


def test_429_then_success_within_the_deadline(serve):
    def responder(req, n):
        return (Reply(status=429, headers={"Retry-After": "0.1"}) if n == 0
                else good_responder(req, n))

    server = serve(responder)
    _, (p,) = propose(config(server, timeout_s=3.0))
    assert p.error is None and p.llm_call["attempts"] == 2


def test_connection_refused_is_retried_then_falls_back(serve):
    server = serve()
    server.stop()  # the port now refuses connections
    op, props = propose(config(server, timeout_s=3.0, retries=2, on_failure="offline"), n=2)
    assert all(p.llm_call["status"] == "unreachable" for p in props)
    assert all(p.llm_call["attempts"] == 3 for p in props)
    assert op.fallen_back


def test_fallback_offline_operator_keeps_the_runs_complexity_cap(serve):
    from evolve.config.schema import Config
    from evolve.search.setup import build_operator

    server = serve(lambda req, n: Reply(status=503))
    cfg = Config()
    cfg.operator.kind = "llm"
    cfg.search.complexity_cap = 12
    cfg.operator.llm_share, cfg.operator.overlap = 1.0, False  # the LLM alone
    cfg.llm = config(server, retries=0)
    op = build_operator(cfg, {})
    props = op.propose([make_parent()], [], np.random.default_rng(3), 2)
    assert op.fallen_back and all(p.source is None for p in props)
    assert op._fallback.max_complexity == 12
    children = op.propose([make_parent()], [], np.random.default_rng(4), 3)
    assert all(p.operator.startswith("offline:") for p in children)


def test_llm_check_reports_whether_the_grammar_is_honoured(serve, capsys):
    from evolve.cli.main import main

    def obeys(req, n):  # a server that honours the probe's grammar
        return Reply(content="evolve-042" if "grammar" in req else "pong")

    for responder, honoured in ((obeys, True), (lambda req, n: Reply(content="Sunny."), False)):
        server = serve(responder)
        assert main(["llm-check", "--llm", "test-model", "--llm-base-url", server.base_url,
                     "--constrain", "gbnf"]) == 0
        out = capsys.readouterr().out
        assert ("grammar   gbnf: honoured" in out) is honoured, out
        assert server.requests[-1]["grammar"].startswith("root ::=")


def test_constrained_requests_carry_the_grammar_and_their_own_cassette_key(serve):
    seen = []

    def responder(req, n):
        seen.append(req)
        return good_responder(req, n)

    server = serve(responder)
    for mode in ("gbnf", "vllm"):
        _, (p,) = propose(config(server, constrain=mode, reply_form="program"))
        assert p.source is not None
    gbnf_req, vllm_req = seen
    assert gbnf_req["grammar"].startswith("root ::=") and "structured_outputs" not in gbnf_req
    assert vllm_req["structured_outputs"]["grammar"].startswith("start:")
    assert "def step_time(f, c)" in gbnf_req["grammar"]


@pytest.mark.parametrize("body", ['{"choices": "abc"}', '{"choices": [{"message": 3}]}',
                                  '{"choices": [{"message": {"content": 5}}]}',
                                  "<html><body>Welcome</body></html>"])
def test_llm_check_on_a_malformed_200_is_one_line(serve, capsys, body):
    """An endpoint that is not OpenAI-compatible may answer 200 with anything (it once
    crashed llm-check with an AttributeError)."""
    from evolve.cli.main import main

    server = serve(lambda req, n: Reply(raw_body=body))
    code = main(["llm-check", "--llm", "test-model", "--llm-base-url", server.base_url])
    err = capsys.readouterr()
    assert code != 0 and "internal error" not in err.err, err
    said = err.out + err.err
    assert any(s in said for s in ("malformed response", "no choices", "no text",
                                   "not a chat completion", "bad response")), said
