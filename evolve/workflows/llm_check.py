"""``evolve llm-check``'s work: one tiny request to an LLM endpoint, and optionally a
second one that shows whether it honours a grammar.

The request goes through the same client and retry policy the operator uses (with fewer
retries and a shorter timeout: :func:`endpoint_config`). ``constrain`` (``gbnf`` or
``vllm``) adds a request that asks for prose but constrains the answer to a tiny grammar
(``evolve-`` and three digits): a reply of that form shows the endpoint honours grammars in
the request's extra body; anything else means it ignores them (a run with
``llm.constrain`` would then get unconstrained replies). :func:`llm_check` returns an
:class:`LLMCheck`; the command renders it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evolve.config.llm import LLMConfig
from evolve.errors import UserError

_PROMPT = "Reply with the single word: pong"
_PROBE_PROMPT = "Write one sentence about the weather."
_PROBE = re.compile(r"evolve-[0-9]{3}")
# the tiny grammar of the probe, per form (llama.cpp GBNF; vLLM's Lark)
_PROBE_BODY: dict[str, dict[str, Any]] = {
    "gbnf": {"grammar": 'root ::= "evolve-" [0-9] [0-9] [0-9]'},
    "vllm": {"structured_outputs": {"grammar": 'start: "evolve-" /[0-9]/ /[0-9]/ /[0-9]/'}},
}


@dataclass
class LLMCheckOptions:
    """What ``evolve llm-check`` was asked for; None: the configuration's value."""

    config: str | None = None  # a run configuration whose [llm] section gives the defaults
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float | None = None


@dataclass
class LLMCheck:
    """The endpoint's answer (``exchange``, an ``evolve.operators.llm.endpoint`` exchange)
    and, when it failed, why in one line."""

    cfg: LLMConfig
    url: str  # the base URL as it may be shown (a key in its query masked)
    exchange: Any
    probe: dict[str, Any]  # the grammar probe's fields (empty without one)
    failure: str | None

    @property
    def cost_usd(self) -> float:
        ex = self.exchange
        return self.cfg.cost_usd(ex.prompt_tokens, ex.completion_tokens)

    def as_dict(self) -> dict[str, Any]:
        """``evolve llm-check --json``'s document."""
        ex = self.exchange
        if self.failure is not None:
            return {"ok": False, "model": self.cfg.model, "base_url": self.url,
                    "attempts": ex.attempts, "error": self.failure}
        return {"ok": True, "model": self.cfg.model, "base_url": self.url,
                "latency_s": ex.latency_s, "attempts": ex.attempts, "reply": ex.reply,
                "finish_reason": ex.finish_reason, "prompt_tokens": ex.prompt_tokens,
                "completion_tokens": ex.completion_tokens,
                "usage_estimated": ex.usage_estimated, "cost_usd": self.cost_usd,
                **self.probe}


def endpoint_config(opts: LLMCheckOptions, warn: Callable[[str], None]) -> LLMConfig:
    """The configuration's ``[llm]`` (or the defaults) with ``opts`` over it, one retry at
    most and a timeout of 30 s at most; no cassette. A user:password@ in the URL is
    dropped (``warn`` says so)."""
    from evolve.text.untrusted import has_userinfo, strip_userinfo

    base = LLMConfig()
    if opts.config:
        from evolve.config.schema import load_config

        base = load_config(opts.config).llm
    fields = base.to_dict()
    fields.update(cassette=None, cassette_mode="off", retries=min(base.retries, 1),
                  timeout_s=min(base.timeout_s, 30.0), backoff_base_s=0.5, backoff_cap_s=2.0)
    if opts.model:
        fields["model"] = opts.model
    if opts.base_url:
        if has_userinfo(opts.base_url):
            warn("note: --llm-base-url: the user:password@ part is dropped, never sent; the "
                 f"key comes from ${fields['api_key_env']}")
        fields["base_url"] = strip_userinfo(opts.base_url)
    if opts.api_key_env:
        fields["api_key_env"] = opts.api_key_env
    if opts.timeout_s is not None:
        fields["timeout_s"] = opts.timeout_s
    try:
        cfg = LLMConfig.from_dict(fields)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if not cfg.model:
        raise UserError("no model: pass --llm MODEL (or set llm.model in --config)")
    return cfg


def llm_check(cfg: LLMConfig, constrain: str | None = None) -> LLMCheck:
    """Send the tiny request (and, if it answered and ``constrain`` names a grammar form,
    the probe); a failure is returned, not raised."""
    from evolve.operators.llm.cassette import canonical_request
    from evolve.operators.llm.endpoint import OK, Endpoint
    from evolve.text.untrusted import mask_secrets

    messages = [{"role": "user", "content": _PROMPT}]
    request = canonical_request(cfg.model, messages, 0.0, 0 if cfg.send_seed else None, 16,
                                "llm-check")
    endpoint = Endpoint(cfg)
    probe: dict[str, Any] = {}
    try:
        ex = endpoint.complete(request)
        if ex.status == OK and constrain:
            probe = _probe(endpoint, cfg, constrain)
    finally:
        endpoint.close()
    failure = None
    url = mask_secrets(cfg.base_url)  # a key in the query (?api_key=...) is not printed
    if ex.status != OK:
        failure = f"{cfg.model} at {url}: {ex.error}"
    elif not (ex.reply or "").strip():  # the search would get no program from it either
        failure = (f"{cfg.model} at {url}: answered with no text (content "
                   f"{ex.reply!r}; finish {ex.finish_reason}): not an OpenAI-compatible "
                   "chat completion?")
    return LLMCheck(cfg, url, ex, probe, failure)


def _probe(endpoint: Any, cfg: LLMConfig, form: str) -> dict[str, Any]:
    """Ask for prose under a grammar that allows only ``evolve-NNN``; conformance = honoured."""
    from evolve.operators.llm.cassette import canonical_request

    request = canonical_request(cfg.model, [{"role": "user", "content": _PROBE_PROMPT}], 0.0,
                                0 if cfg.send_seed else None, 12, "llm-check")
    request["extra_body"] = _PROBE_BODY[form]
    ex = endpoint.complete(request)
    reply = (ex.reply or "").strip()
    return {"constrain": form, "constrain_reply": reply if ex.status == "ok" else ex.error,
            "constrain_honoured": ex.status == "ok" and bool(_PROBE.fullmatch(reply))}
