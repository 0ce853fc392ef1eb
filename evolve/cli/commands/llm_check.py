"""``evolve llm-check``: one tiny request to an LLM endpoint, before spending a run on it.

Why: a long run that falls back to the offline operator after its first batch because the
URL, key or model name is wrong wastes the user's time. The request (and, with
``--constrain gbnf|vllm``, a second one that shows whether the endpoint honours a grammar)
is :func:`evolve.workflows.llm_check.llm_check`; this module checks the flags and prints
latency, the reply and token usage; an unreachable or refusing endpoint is one line and a
non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import sys

from evolve.config.llm import MAX_TIMEOUT_S, LLMConfig
from evolve.errors import EvolveError, UserError
from evolve.workflows.llm_check import LLMCheckOptions, endpoint_config, llm_check

HELP = "send one tiny request to an LLM endpoint"


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
    from evolve.workflows.targets import not_blank

    not_blank(args.llm, "--llm", "the endpoint's model")  # "$VAR" unset: never the default
    not_blank(args.llm_base_url, "--llm-base-url", "the endpoint's URL")
    not_blank(args.api_key_env, "--api-key-env", "the variable holding the key")
    if args.timeout is not None and not 0 < args.timeout <= MAX_TIMEOUT_S:  # 1e300: socket
        raise UserError(f"--timeout {args.timeout:g}: must be a number of seconds in "
                        f"(0, {MAX_TIMEOUT_S}]")
    opts = LLMCheckOptions(args.config, args.llm, args.llm_base_url, args.api_key_env,
                           args.timeout)
    return endpoint_config(opts, lambda msg: print(msg, file=sys.stderr))


def run(args: argparse.Namespace) -> int:
    from evolve.text.untrusted import printable

    try:
        cfg = _config(args)
    except EvolveError as exc:  # --json: an answer on stdout for every failure
        if args.json:
            print(json.dumps({"ok": False, "error": str(exc)}, sort_keys=True))
        raise
    check = llm_check(cfg, args.constrain)
    if check.failure is not None:
        if args.json:  # a script reading stdout gets an answer too; the line goes to stderr
            print(json.dumps(check.as_dict(), sort_keys=True))
        raise UserError(check.failure)
    if args.json:
        print(json.dumps(check.as_dict(), sort_keys=True))
        return 0
    ex, probe = check.exchange, check.probe
    usage = "estimated" if ex.usage_estimated else "reported"
    print(f"endpoint  {check.url}\nmodel     {printable(cfg.model)}\n"
          f"latency   {ex.latency_s:.3f} s ({ex.attempts} attempt(s))\n"
          f"reply     {(ex.reply or '').strip()!r} (finish: {printable(str(ex.finish_reason))})\n"
          f"tokens    {ex.prompt_tokens} prompt + {ex.completion_tokens} completion ({usage})\n"
          f"cost      ${check.cost_usd:.6f}")
    if probe:
        verdict = "honoured" if probe["constrain_honoured"] else "IGNORED"
        print(f"grammar   {args.constrain}: {verdict} (constrained reply "
              f"{probe['constrain_reply']!r})")
    return 0
