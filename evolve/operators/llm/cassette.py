"""Record/replay of LLM exchanges, so a run that used an LLM can be reproduced bit for bit.

Every exchange is one JSON line keyed by the sha256 of its *canonical request* (model,
messages, temperature, seed, max_tokens, template_version as canonical JSON with sorted
keys). ``record`` appends a line per exchange and fsyncs it, so a killed run loses nothing
it paid for; ``replay`` serves strictly: a request the cassette does not hold is an error
that stops the run, because silently calling the endpoint (or inventing a reply) would make
the replayed archive differ from the recorded one without anyone noticing.

Failed exchanges (timeouts, 5xx after all retries) are recorded too: the run's decisions
depend on them (error proposals, fallback to the offline operator), so replay must see them.
When a hash occurs more than once in a file (a request recorded twice), the last line wins.

Loading checks every line completely (UTF-8, strict JSON without NaN, the request's hash,
every field of the exchange: see ``llm_endpoint.exchange_problem``), because a replayed
exchange is only used generations into a run: a bad line must stop the run before it
starts, as one line naming file, line and field, not as a crash minutes later.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from evolve.errors import CassetteError, CassetteMiss
from evolve.operators.llm.endpoint import exchange_problem

Mode = Literal["off", "record", "replay"]
CASSETTE_FORMAT = 1


def canonical_request(model: str, messages: Sequence[dict[str, str]], temperature: float,
                      seed: int | None, max_tokens: int, template_version: str,
                      constrain: str = "off", form: str = "program",
                      term_constants: int | None = None) -> dict[str, Any]:
    """The fields that determine a reply; everything else (timeouts, retries) does not.

    ``constrain`` (gbnf | vllm) adds ``{"mode", "grammar"}`` – the grammar's digest – so a
    constrained request and a grammar change get their own keys; unconstrained requests
    hash exactly as before the field existed. ``form = "term"`` (the reply form,
    :mod:`evolve.operators.llm.term`) adds ``"reply_form": "term"`` and, constrained,
    ``"form": "term"`` beside the term grammar's digest; program requests hash as before.
    ``term_constants`` below the term maximum (a parent with little room left) makes it
    ``"form": "term:N"``, the grammar of a term with at most N constants.
    """
    out: dict[str, Any] = {
        "model": model,
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "temperature": float(temperature),
        "seed": None if seed is None else int(seed),
        "max_tokens": int(max_tokens),
        "template_version": template_version,
    }
    if form == "term":
        out["reply_form"] = "term"
    if constrain != "off":
        from evolve.program.grammar_strict import TERM_CONSTANTS, grammar_text, term_grammar_form

        grammar = (term_grammar_form(term_constants or TERM_CONSTANTS) if form == "term"
                   else form)
        text = grammar_text(constrain, grammar)
        out["constrain"] = {"mode": constrain,
                            "grammar": hashlib.sha256(text.encode()).hexdigest()[:16]}
        if form == "term":
            out["constrain"]["form"] = grammar
    return out


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: the same request always gives the same bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def request_hash(request: dict[str, Any]) -> str:
    """sha256 hex of the canonical JSON of a canonical request."""
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


class Cassette:
    """A JSONL file of exchanges, opened in one mode for the life of a run.

    ``get`` (replay) returns the recorded exchange dict; ``put`` (record) appends one.
    Thread-safe: the LLM operator calls it from its worker threads.
    """

    def __init__(self, path: str | os.PathLike[str], mode: Mode):
        if mode not in ("off", "record", "replay"):
            raise ValueError(f"cassette mode must be off, record or replay, not {mode!r}")
        self.path = Path(path)
        self.mode: Mode = mode
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] = {}
        if mode == "replay":
            if not self.path.is_file():
                raise CassetteError(f"cassette {self.path}: file not found (needed for replay)")
            self._entries = load_entries(self.path)
            if not self._entries:  # else the run would fail at its first request, later
                raise CassetteError(f"cassette {self.path}: empty (nothing recorded)")
        elif mode == "record":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_file():
                # Appending to a cassette: validate what is there, so a corrupt file is found
                # now and not when someone tries to replay it.
                self._entries = load_entries(self.path)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, request_hash: str) -> bool:
        return request_hash in self._entries

    def get(self, request_hash: str) -> dict[str, Any]:
        """The recorded exchange for ``request_hash``; raises :class:`CassetteMiss`."""
        with self._lock:
            entry = self._entries.get(request_hash)
        if entry is None:
            raise CassetteMiss(self.path, request_hash)
        return entry["exchange"]

    def put(self, request_hash: str, request: dict[str, Any], exchange: dict[str, Any]) -> None:
        """Append one exchange and force it to disk before returning."""
        if self.mode != "record":
            raise CassetteError(f"cassette {self.path}: put() in mode {self.mode}")
        entry = {"format": CASSETTE_FORMAT, "hash": request_hash, "request": request,
                 "exchange": exchange}
        line = canonical_json(entry) + "\n"
        with self._lock:
            with open(self.path, "a", encoding="utf-8") as fh:
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
            self._entries[request_hash] = entry


def load_entries(path: Path) -> dict[str, dict[str, Any]]:
    """Parse a cassette; a bad line raises :class:`CassetteError` naming file and line."""
    entries: dict[str, dict[str, Any]] = {}
    with open(path, "rb") as fh:  # bytes: a non-UTF-8 line is reported with its number
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CassetteError(f"cassette {path}:{lineno}: not UTF-8 (byte "
                                    f"0x{raw[exc.start]:02x} at column {exc.start + 1})") from None
            if not line.strip():
                continue
            entry, problem = parse_line(line)
            if problem:
                raise CassetteError(f"cassette {path}:{lineno}: {problem}")
            entries[entry["hash"]] = entry
    return entries


def parse_line(line: str) -> tuple[Any, str]:
    """(entry, '') for a valid cassette line, else (None, why it is not one)."""
    try:
        entry = json.loads(line)
        problem = _entry_problem(entry)
    except json.JSONDecodeError as exc:
        at = "" if exc.msg.endswith(" at") else " at"  # "Invalid control character at"
        return None, f"not a JSON object (truncated?): {exc.msg}{at} column {exc.colno}"
    except (ValueError, RecursionError, OverflowError) as exc:  # past the parser's limits
        from evaluator.api import limit_problem

        return None, f"not a cassette entry: {limit_problem(exc, line)}"
    return (None, problem) if problem else (entry, "")


def _entry_problem(entry: Any) -> str:
    if not isinstance(entry, dict):
        return f"not a JSON object (a {type(entry).__name__})"
    if entry.get("format") != CASSETTE_FORMAT:
        return f"unsupported format {entry.get('format')!r} (expected {CASSETTE_FORMAT})"
    for key, kind in (("hash", str), ("request", dict), ("exchange", dict)):
        if not isinstance(entry.get(key), kind):
            return f"corrupt line (missing or bad {key!r})"
    bad = _non_finite(entry["request"], "request")  # NaN is no JSON: it cannot be hashed
    if bad:
        return f"field {bad!r} is not a finite number (NaN and Infinity are not JSON)"
    try:
        digest = request_hash(entry["request"])
    except ValueError as exc:  # e.g. a lone surrogate ("\\ud800"), which UTF-8 cannot encode
        return f"request cannot be hashed ({type(exc).__name__}: {str(exc)[:80]})"
    if digest != entry["hash"]:
        return "corrupt line (hash does not match its request)"
    return exchange_problem(entry["exchange"])


def _non_finite(value: Any, where: str) -> str:
    """The path of the first NaN/±Infinity in ``value`` ('' if none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return ""
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if isinstance(key, str) else f"{where}[{key}]")
        if found:
            return found
    return ""
