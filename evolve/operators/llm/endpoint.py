"""One chat completion against an OpenAI-compatible endpoint, with our own retry loop.

Why not the client's retries: ``openai`` retries with random jitter and its own notion of
what is retryable, invisibly. Here the client runs with ``max_retries=0`` and this module
decides: 429 (honouring Retry-After), 5xx and connection errors (refused, reset) are retried
with exponential backoff (no jitter – concurrency is small and determinism is worth more)
or after the server's Retry-After / retry-after-ms (capped at ``backoff_cap_s``), and
every attempt is counted, so the archive says what a call really cost in time.

Why ``timeout_s`` is a deadline of the whole call and a timeout is never retried: a server
that took longer than the deadline once (a slow CPU model, a long prompt) takes as long the
next time, so retrying only multiplies the loss (measured: 4 of 12 requests to a local
135M model timed out five times in a row, 615 s each). Each attempt gets what is left of
the deadline, and a retry whose wait would not fit in it is not started.

Constrained decoding (``constrain`` in the canonical request): the program grammar goes in
the request's extra body – ``grammar`` (GBNF) for llama.cpp servers, ``structured_outputs:
{"grammar": ...}`` (Lark) for vLLM.

Bounds and secrets: a reply longer than ``llm.max_reply_bytes`` (default 64 KiB; an
endpoint that ignored ``max_tokens`` once sent 60 MB, stored whole in the archive, the
cassette and the report) is cut there (:func:`cap_reply`), the reason in ``error``. The
client is built from the base URL without ``user:password@`` (the HTTP client would send
it as Basic auth in place of the bearer key), and error texts have URL secrets masked.

The outcome is an :class:`Exchange`, a plain record that is also what a cassette stores.
"""

from __future__ import annotations

import dataclasses
import email.utils
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from evolve.config.llm import MAX_REPLY_BYTES, LLMConfig
from evolve.text.untrusted import mask_secrets, strip_userinfo

# Exchange.status values. "unreachable" and "rejected" mean the endpoint itself failed
# (after all retries, or it refuses us: bad key, unknown model); "api_error" is a failure
# specific to this request (e.g. 400 context too long).
OK, UNREACHABLE, REJECTED, API_ERROR = "ok", "unreachable", "rejected", "api_error"
STATUSES = (OK, UNREACHABLE, REJECTED, API_ERROR)
ENDPOINT_FAILURES = frozenset({UNREACHABLE, REJECTED})
# Largest token count taken at face value: exact as a float and as a JSON number everywhere,
# far beyond any real usage, and well inside SQLite's 64-bit INTEGER.
MAX_TOKENS = 2**53
_REJECTED_CODES = frozenset({401, 403, 404})


@dataclass(frozen=True)
class Exchange:
    """What came back for one request (after retries)."""

    status: str
    reply: str | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float  # wall time of the whole call, all attempts and waits included
    attempts: int
    error: str | None
    usage_estimated: bool = False  # the server sent no usage; counts are our estimates

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Exchange:
        """The exchange stored as ``data``; ValueError (naming the field) if it is not one
        :meth:`to_dict` could have written – a replayed exchange is used deep in a run,
        so a bad one must be refused where it is read, not crash a generation later."""
        problem = exchange_problem(data)
        if problem:
            raise ValueError(problem)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def exchange_problem(data: Any) -> str:
    """Why ``data`` is not a stored :class:`Exchange` ('' if it is one): every field but
    ``usage_estimated`` (optional: it defaults to False) present with its type, ``status`` one
    of :data:`STATUSES`, counts integers in 0..2**53, latency finite and >= 0."""
    if not isinstance(data, dict):
        return f"exchange is a {type(data).__name__}, not an object"
    for name, kinds in (("status", (str,)), ("reply", (str, type(None))),
                        ("finish_reason", (str, type(None))), ("prompt_tokens", (int,)),
                        ("completion_tokens", (int,)), ("latency_s", (int, float)),
                        ("attempts", (int,)), ("error", (str, type(None))),
                        ("usage_estimated", (bool,))):
        if name not in data:
            if name == "usage_estimated":
                continue
            return f"field 'exchange.{name}' is missing"
        value = data[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            return (f"field 'exchange.{name}' must be {' or '.join(_KIND[k] for k in kinds)}, "
                    f"not {_short(repr(value), 60)}")
    for name in ("status", "reply", "finish_reason", "error"):
        if isinstance(data[name], str) and not _is_utf8(data[name]):
            return f"field 'exchange.{name}' holds a lone surrogate (not UTF-8 text)"
    if data["status"] not in STATUSES:
        return (f"field 'exchange.status' must be one of {', '.join(STATUSES)}, not "
                f"{_short(repr(data['status']), 60)}")
    for name in ("prompt_tokens", "completion_tokens", "attempts"):
        if not 0 <= data[name] <= MAX_TOKENS:
            return f"field 'exchange.{name}' must be in 0..2**53, not {_short(str(data[name]), 60)}"
    if not 0 <= data["latency_s"] < float("inf"):
        return f"field 'exchange.latency_s' must be finite and >= 0, not {data['latency_s']!r}"
    return ""


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_KIND = {str: "text", type(None): "null", int: "an integer", float: "a number",
         bool: "true or false"}


class Endpoint:
    """An ``openai.OpenAI`` client plus the retry policy of an :class:`LLMConfig`."""

    def __init__(self, cfg: LLMConfig, sleep: Callable[[float], None] = time.sleep):
        import openai  # imported here: `evolve --help` and offline runs need not pay for it

        self.cfg = cfg
        self._sleep = sleep
        self._openai = openai
        base, query = endpoint_parts(cfg.base_url)
        self._client = openai.OpenAI(base_url=base, default_query=query or None,
                                     api_key=cfg.api_key(), max_retries=0,
                                     timeout=cfg.timeout_s)

    def close(self) -> None:
        self._client.close()

    def complete(self, request: dict[str, Any],
                 estimate: Callable[[str], int] | None = None) -> Exchange:
        """Send ``request`` (a cassette canonical request) until it succeeds or fails for good."""
        openai = self._openai
        kwargs: dict[str, Any] = {
            "model": request["model"], "messages": request["messages"],
            "temperature": request["temperature"], "max_tokens": request["max_tokens"]}
        if request.get("seed") is not None:
            kwargs["seed"] = request["seed"]
        extra = request.get("extra_body") or extra_body(request.get("constrain"))
        if extra:
            kwargs["extra_body"] = extra
        start = time.monotonic()
        deadline = start + self.cfg.timeout_s
        error = ""
        attempts = 0
        for attempt in range(self.cfg.retries + 1):
            attempts = attempt + 1
            retry_after: float | None = None
            left = deadline - time.monotonic()
            try:
                resp = self._client.chat.completions.create(**kwargs, timeout=max(left, 0.001))
            except openai.APITimeoutError:
                return self._failed(UNREACHABLE, f"timeout: no reply within the "
                                    f"{self.cfg.timeout_s:g} s deadline (not retried)", start,
                                    attempts)
            except openai.APIConnectionError as exc:
                error = f"connection error: {_cause(exc)}"
            except openai.APIStatusError as exc:
                code = exc.status_code
                error = f"HTTP {code}: {_short(exc.message)}" + (
                    " (no chat completions there: is base_url an OpenAI-compatible /v1?)"
                    if code in (404, 405, 501) else "")
                if code == 429 or code >= 500:  # retryable; the server may say when
                    retry_after = _retry_after(exc.response.headers)
                else:
                    status = REJECTED if code in _REJECTED_CODES else API_ERROR
                    return self._failed(status, error, start, attempts)
            except (openai.APIError, ValueError) as exc:  # e.g. a 200 with a non-JSON body
                return self._failed(API_ERROR, f"bad response: {type(exc).__name__}: "
                                    f"{_short(str(exc))}", start, attempts)
            else:
                return self._success(resp, request, start, attempts, estimate)
            if attempt < self.cfg.retries:
                wait = self.delay(attempt, retry_after)
                if time.monotonic() + wait >= deadline:
                    return self._failed(UNREACHABLE, f"{error} (after {attempts} attempts; "
                                        f"a retry would pass the {self.cfg.timeout_s:g} s "
                                        "deadline)", start, attempts)
                self._sleep(wait)
        return self._failed(UNREACHABLE, f"{error} (after {attempts} attempts)", start, attempts)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds before retry ``attempt + 1``: Retry-After if given, else base * 2^attempt;
        both capped at ``backoff_cap_s``."""
        if retry_after is not None:
            return max(0.0, min(retry_after, self.cfg.backoff_cap_s))
        return min(self.cfg.backoff_base_s * (2.0 ** attempt), self.cfg.backoff_cap_s)

    def _success(self, resp: Any, request: dict[str, Any], start: float, attempts: int,
                 estimate: Callable[[str], int] | None) -> Exchange:
        latency = time.monotonic() - start
        if not hasattr(resp, "choices"):  # e.g. an HTML page sent with a 200
            return self._failed(API_ERROR, f"bad response: not a chat completion "
                                f"({_short(str(resp))!r})", start, attempts)
        choices = resp.choices or []
        if not choices:
            return self._failed(API_ERROR, "response has no choices", start, attempts)
        try:  # an endpoint that is not OpenAI-compatible may send anything with a 200
            message = choices[0].message
            reply = getattr(message, "content", None)
            if reply is not None and not isinstance(reply, str):
                raise TypeError(f"content is a {type(reply).__name__}")
            if reply is not None and not _is_utf8(reply):  # JSON's "\ud800": no UTF-8
                # the archive and the cassette store UTF-8; a lone surrogate becomes "?"
                reply = reply.encode("utf-8", "replace").decode("utf-8")
            counts = _usage_counts(getattr(resp, "usage", None))
            estimated = counts is None
            if counts is None:
                count = estimate or (lambda text: len(text) // 4)
                prompt_tokens = sum(count(m["content"]) for m in request["messages"])
                completion_tokens = count(reply or "")
            else:
                prompt_tokens, completion_tokens = counts
            finish = choices[0].finish_reason
        except (AttributeError, TypeError, ValueError, IndexError, KeyError) as exc:
            return self._failed(API_ERROR, f"malformed response: {exc}", start, attempts)
        return cap_reply(Exchange(OK, reply, finish, prompt_tokens, completion_tokens,
                                  round(latency, 6), attempts, None, estimated),
                         self.cfg.max_reply_bytes)

    @staticmethod
    def _failed(status: str, error: str, start: float, attempts: int) -> Exchange:
        return Exchange(status, None, None, 0, 0, round(time.monotonic() - start, 6),
                        attempts, mask_secrets(error))


def endpoint_parts(url: str) -> tuple[str, dict[str, str]]:
    """(base URL without ``user:password@`` and query, the query's parameters): the client
    appends paths to the base, so a query (``?api-version=...``, a key some gateways take
    there) is sent as parameters of every request instead."""
    parts = urlsplit(strip_userinfo(url))
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit(parts._replace(query="", fragment="")), query


def cap_reply(ex: Exchange, cap: int = MAX_REPLY_BYTES) -> Exchange:
    """``ex`` with its reply cut to ``cap`` UTF-8 bytes (at a character boundary) and the
    reason added to ``error``; unchanged when the reply fits. Applied to every exchange,
    from the endpoint, a cassette or the journal, before it is stored or shown."""
    reply = ex.reply
    if reply is None or len(reply) * 4 <= cap:  # fits whatever the characters
        return ex
    data = reply.encode("utf-8", "surrogatepass")
    if len(data) <= cap:
        return ex
    cut = data[:cap].decode("utf-8", "ignore")  # a character cut in two is dropped
    note = f"reply cut to {cap} bytes of {len(data)} bytes (llm.max_reply_bytes)"
    return dataclasses.replace(ex, reply=cut, error="; ".join(x for x in (ex.error, note) if x))


def _usage_counts(usage: Any) -> tuple[int, int] | None:
    """(prompt, completion) tokens the server reported, or None: estimate them instead.

    Why estimate rather than refuse or clamp: budgets (``max_total_tokens``,
    ``max_cost_usd``) add these counts up. A negative count would refund budget, a count
    like 1e300 overflows the archive's INTEGER column, NaN passes every budget test; but
    the reply itself may be fine. So usage whose counts are not integers in 0..2**53 is
    treated as absent: the counts are estimated from the text, as for a server that sends
    no usage (``usage_estimated`` says so), which keeps every budget bounded and honest.
    A missing ``prompt_tokens`` means no usage; a missing ``completion_tokens`` counts 0.
    """
    if usage is None or getattr(usage, "prompt_tokens", None) is None:
        return None
    out = []
    for value in (usage.prompt_tokens, getattr(usage, "completion_tokens", None) or 0):
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 12.0 is a count; inf and nan are not integers
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
            return None
        out.append(value)
    return out[0], out[1]


def extra_body(constrain: Any) -> dict[str, Any]:
    """The extra request body that constrains decoding to the program grammar (see the
    module doc); empty when ``constrain`` is unset/off. The grammar is generated here from
    the mode, and the canonical request carries its digest, so a grammar change is a new
    cassette key."""
    mode = constrain.get("mode") if isinstance(constrain, dict) else None
    if mode not in ("gbnf", "vllm"):
        return {}
    from evolve.program.grammar_strict import grammar_text

    assert isinstance(constrain, dict)
    text = grammar_text(mode, str(constrain.get("form", "program")))
    return {"grammar": text} if mode == "gbnf" else {"structured_outputs": {"grammar": text}}


def _retry_after(headers: Any) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (delta seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc.__context__
    return _short(str(inner) if inner is not None and str(inner) else str(exc))


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
