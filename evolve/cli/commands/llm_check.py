"""``evolve llm-check``: one tiny request to an LLM endpoint, before spending a run on it.

Why: a long run that falls back to the offline operator after its first batch because the
URL, key or model name is wrong wastes the user's time. This sends one short chat request
through the same client and retry policy the operator uses (with fewer retries) and prints
latency, the reply and token usage; an unreachable or refusing endpoint is one line and a
non-zero exit.

``--constrain gbnf|vllm`` adds a second request that asks for prose but constrains the
answer to a tiny grammar (``evolve-`` and three digits): a reply of that form shows the
endpoint honours grammars in the request's extra body; anything else means it ignores them
(a run with ``llm.constrain`` would then get unconstrained replies).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from evolve.config.llm import MAX_TIMEOUT_S, LLMConfig
from evolve.errors import EvolveError, UserError

HELP = "send one tiny request to an LLM endpoint"

_PROMPT = "Reply with the single word: pong"
_PROBE_PROMPT = "Write one sentence about the weather."
_PROBE = re.compile(r"evolve-[0-9]{3}")
# the tiny grammar of the probe, per form (llama.cpp GBNF; vLLM's Lark)
_PROBE_BODY: dict[str, dict[str, Any]] = {
    "gbnf": {"grammar": 'root ::= "evolve-" [0-9] [0-9] [0-9]'},
    "vllm": {"structured_outputs": {"grammar": 'start: "evolve-" /[0-9]/ /[0-9]/ /[0-9]/'}},
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = LLMConfig()
    parser.add_argument("--config", metavar="TOML",
                        help="run configuration whose [llm] section gives the defaults")
    parser.add_argument("--llm", metavar="MODEL", help="model name at the endpoint")
    parser.add_argument("--llm-base-url", metavar="URL",
                        help=f"OpenAI-compatible base URL (default {defaults.base_url})")
    parser.add_argument("--api-key-env", metavar="NAME",
                        help=f"environment variable holding the key (default "
                             f"{defaults.api_key_env}; unset sends 'EMPTY')")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="request timeout in seconds (default: the config's, capped at 30)")
    parser.add_argument("--constrain", choices=("gbnf", "vllm"),
                        help="also check that the endpoint honours a grammar in this form")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _config(args: argparse.Namespace) -> LLMConfig:
    from evolve.text.untrusted import has_userinfo, strip_userinfo
    from evolve.workflows.targets import not_blank

    not_blank(args.llm, "--llm", "the endpoint's model")  # "$VAR" unset: never the default
    not_blank(args.llm_base_url, "--llm-base-url", "the endpoint's URL")
    not_blank(args.api_key_env, "--api-key-env", "the variable holding the key")
    if args.timeout is not None and not 0 < args.timeout <= MAX_TIMEOUT_S:  # 1e300: socket
        raise UserError(f"--timeout {args.timeout:g}: must be a number of seconds in "
                        f"(0, {MAX_TIMEOUT_S}]")
    base = LLMConfig()
    if args.config:
        from evolve.config.schema import load_config

        base = load_config(args.config).llm
    fields = base.to_dict()
    fields.update(cassette=None, cassette_mode="off", retries=min(base.retries, 1),
                  timeout_s=min(base.timeout_s, 30.0), backoff_base_s=0.5, backoff_cap_s=2.0)
    if args.llm:
        fields["model"] = args.llm
    if args.llm_base_url:
        if has_userinfo(args.llm_base_url):
            print("note: --llm-base-url: the user:password@ part is dropped, never sent; the "
                  f"key comes from ${fields['api_key_env']}", file=sys.stderr)
        fields["base_url"] = strip_userinfo(args.llm_base_url)
    if args.api_key_env:
        fields["api_key_env"] = args.api_key_env
    if args.timeout is not None:
        fields["timeout_s"] = args.timeout
    try:
        cfg = LLMConfig.from_dict(fields)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if not cfg.model:
        raise UserError("no model: pass --llm MODEL (or set llm.model in --config)")
    return cfg


def run(args: argparse.Namespace) -> int:
    from evolve.operators.llm.cassette import canonical_request
    from evolve.operators.llm.endpoint import OK, Endpoint
    from evolve.text.untrusted import mask_secrets, printable

    try:
        cfg = _config(args)
    except EvolveError as exc:  # --json: an answer on stdout for every failure
        if args.json:
            print(json.dumps({"ok": False, "error": str(exc)}, sort_keys=True))
        raise
    messages = [{"role": "user", "content": _PROMPT}]
    request = canonical_request(cfg.model, messages, 0.0, 0 if cfg.send_seed else None, 16,
                                "llm-check")
    endpoint = Endpoint(cfg)
    probe: dict[str, Any] = {}
    try:
        ex = endpoint.complete(request)
        if ex.status == OK and args.constrain:
            probe = _probe(endpoint, cfg, args.constrain)
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
    if failure is not None:
        if args.json:  # a script reading stdout gets an answer too; the line goes to stderr
            print(json.dumps({"ok": False, "model": cfg.model, "base_url": url,
                              "attempts": ex.attempts, "error": failure}, sort_keys=True))
        raise UserError(failure)
    cost = cfg.cost_usd(ex.prompt_tokens, ex.completion_tokens)
    result = {"ok": True, "model": cfg.model, "base_url": url, "latency_s": ex.latency_s,
              "attempts": ex.attempts, "reply": ex.reply, "finish_reason": ex.finish_reason,
              "prompt_tokens": ex.prompt_tokens, "completion_tokens": ex.completion_tokens,
              "usage_estimated": ex.usage_estimated, "cost_usd": cost, **probe}
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    usage = "estimated" if ex.usage_estimated else "reported"
    print(f"endpoint  {url}\nmodel     {printable(cfg.model)}\n"
          f"latency   {ex.latency_s:.3f} s ({ex.attempts} attempt(s))\n"
          f"reply     {(ex.reply or '').strip()!r} (finish: {printable(str(ex.finish_reason))})\n"
          f"tokens    {ex.prompt_tokens} prompt + {ex.completion_tokens} completion ({usage})\n"
          f"cost      ${cost:.6f}")
    if probe:
        verdict = "honoured" if probe["constrain_honoured"] else "IGNORED"
        print(f"grammar   {args.constrain}: {verdict} (constrained reply "
              f"{probe['constrain_reply']!r})")
    return 0


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
