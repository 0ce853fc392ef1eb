"""evolve.workflows.llm_check: the endpoint's configuration for one quick check, and the
JSON document of an answer and of a failure."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evolve.config.llm import LLMConfig
from evolve.errors import UserError
from evolve.workflows.llm_check import LLMCheck, LLMCheckOptions, endpoint_config


def test_one_retry_a_short_timeout_and_no_cassette():
    said: list[str] = []
    cfg = endpoint_config(LLMCheckOptions(model="m", base_url="http://u:p@h:1/v1"),
                          said.append)
    assert cfg.model == "m" and cfg.base_url == "http://h:1/v1"
    assert cfg.retries <= 1 and cfg.timeout_s <= 30.0 and cfg.cassette is None
    assert len(said) == 1 and "user:password@ part is dropped" in said[0]
    assert endpoint_config(LLMCheckOptions(model="m", timeout_s=90.0), said.append
                           ).timeout_s == 90.0  # asked for: kept


def test_no_model_is_refused():
    with pytest.raises(UserError, match="no model"):
        endpoint_config(LLMCheckOptions(), lambda _m: None)


def _ex(**kw):
    base = dict(attempts=1, latency_s=0.5, reply="pong", finish_reason="stop",
                prompt_tokens=12, completion_tokens=1, usage_estimated=False)
    return SimpleNamespace(**(base | kw))


def test_as_dict_of_an_answer_and_of_a_failure():
    cfg = LLMConfig.from_dict(LLMConfig().to_dict() | {"model": "m"})
    ok = LLMCheck(cfg, "http://h/v1", _ex(), {"constrain": "gbnf"}, None).as_dict()
    assert ok["ok"] is True and ok["reply"] == "pong" and ok["constrain"] == "gbnf"
    assert ok["cost_usd"] == cfg.cost_usd(12, 1)
    bad = LLMCheck(cfg, "http://h/v1", _ex(attempts=2), {}, "m at http://h/v1: down").as_dict()
    assert bad == {"ok": False, "model": "m", "base_url": "http://h/v1", "attempts": 2,
                   "error": "m at http://h/v1: down"}
