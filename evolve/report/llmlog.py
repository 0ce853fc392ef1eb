"""Page 5, the LLM log: every exchange with its prompt, reply, verdict and rejection reason.

The archive keeps each call (``llm_calls``: reply, tokens, cost, status, error) and each
proposal's outcome (``evaluations``: accepted with a loss, or rejected with a reason), but
not the link between them, nor the prompt. Both are recovered without guessing:

* **Verdicts.** Within a generation the loop writes one ``llm_calls`` row per call and one
  ``evaluations`` row per proposal, both in proposal order; every LLM proposal has exactly
  one call except those whose prompt could not be built (their reason names
  ``prompt_token_cap``). So, per generation, the LLM proposals' evaluations minus those
  pair one to one, in order, with the calls. If the counts still differ (an archive written
  by other code), the generation's calls are shown with verdict ``unmatched``.
* **Prompts** live in the run's cassette (JSONL keyed by the request hash), when the run
  recorded one: ``--cassette F`` or the run's own ``llm.cassette`` path. Without it, the
  prompt column says so.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.errors import CassetteError
from evolve.report.data import EvalBrief, RunData

VERDICTS = ("accepted", "no program", "does not parse", "duplicate", "same predictions",
            "over complexity cap", "fit failed", "invalid", "budget", "call failed",
            "rejected", "unmatched")


@dataclass
class Exchange:
    """One LLM call with what became of its proposal."""

    anchor: str  # HTML id on the LLM page: g<generation>-<seq>
    generation: int
    seq: int
    model: str
    status: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float
    cached: bool
    reply: str
    error: str
    prompt: list[dict[str, str]] | None  # chat messages from the cassette, None: unknown
    verdict: str
    reason: str
    program_id: str | None
    loss: float | None


def verdict_of(ev: EvalBrief | None, call_status: str) -> str:
    """A short class of the outcome, for the page's filter."""
    if ev is None:
        return "unmatched"
    if ev.status == "accepted":
        return "accepted"
    r = ev.reason
    for prefix, verdict in (("does not parse", "does not parse"), ("duplicate", "duplicate"),
                            ("same predictions", "same predictions"),
                            ("complexity", "over complexity cap"), ("fit failed", "fit failed"),
                            ("scoring failed", "fit failed"), ("invalid", "invalid"),
                            ("evaluation budget", "budget")):
        if r.startswith(prefix):
            return verdict
    if call_status == "no_program":
        return "no program"
    if call_status not in ("ok", ""):
        return "call failed"
    return "rejected"


def load_prompts(path: Path | None) -> dict[str, list[dict[str, str]]]:
    """request hash -> chat messages, from a cassette file; {} if absent.

    Read leniently (a report should not fail on a half-written last line): lines that are
    not JSON objects with a hash and a request are skipped. A line that is not UTF-8 is
    skipped only when it is the unterminated last one (a write cut mid-character);
    elsewhere the file is no cassette, and :class:`CassetteError` names file and line.
    """
    if path is None or not path.is_file():
        return {}
    out: dict[str, list[dict[str, str]]] = {}
    with open(path, "rb") as fh:  # bytes, split at b"\n" only: the numbering of load_entries
        raws = list(fh)
    for lineno, raw in enumerate(raws, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if lineno == len(raws) and not raw.endswith(b"\n"):
                continue
            raise CassetteError(f"cassette {path}:{lineno}: not UTF-8 (byte "
                                f"0x{raw[exc.start]:02x} at column {exc.start + 1})") from None
        try:
            entry = json.loads(line)
            out[str(entry["hash"])] = [
                {"role": str(m.get("role", "")), "content": str(m.get("content", ""))}
                for m in entry["request"]["messages"]]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            continue
    return out


def cassette_path(data: RunData, override: str | Path | None) -> Path | None:
    """The cassette to read prompts from: ``override``, else the run's own (if it exists)."""
    if override:
        return Path(override)
    p = data.config.get("llm", {}).get("cassette")
    return Path(p) if p and Path(p).is_file() else None


def match_calls(data: RunData) -> dict[tuple[int, int], EvalBrief | None]:
    """(generation, call seq) -> the evaluation of the proposal that call produced."""
    llm_evals: dict[int, list[EvalBrief]] = defaultdict(list)
    for e in data.evals:
        if e.kind in ("child", "screen") and e.operator.startswith("llm:") \
                and "prompt_token_cap" not in e.reason:
            llm_evals[e.generation].append(e)
    calls: dict[int, list[Any]] = defaultdict(list)
    for c in data.llm_calls:
        calls[c.generation].append(c)
    out: dict[tuple[int, int], EvalBrief | None] = {}
    for g, cs in calls.items():
        evs = llm_evals.get(g, [])
        paired = len(evs) == len(cs)
        for i, c in enumerate(cs):
            out[(g, c.seq)] = evs[i] if paired else None
    return out


def build_llm_log(data: RunData, cassette: str | Path | None = None) -> list[Exchange]:
    prompts = load_prompts(cassette_path(data, cassette))
    matched = match_calls(data)
    out = []
    for c in data.llm_calls:
        ev = matched.get((c.generation, c.seq))
        out.append(Exchange(
            f"g{c.generation}-{c.seq}", c.generation, c.seq, c.model, c.status,
            c.prompt_tokens, c.completion_tokens, c.cost_usd, c.latency_s, bool(c.cached),
            c.reply, c.error, prompts.get(c.request_hash), verdict_of(ev, c.status),
            ev.reason if ev else "", ev.program_id if ev else None,
            ev.loss if ev and ev.status == "accepted" else None))
    return out


def anchors_by_program(log: list[Exchange]) -> dict[str, str]:
    """program id -> the anchor of the (first) exchange that produced it (a duplicate
    names an older program, which that exchange did not produce)."""
    out: dict[str, str] = {}
    for x in log:
        if x.program_id and x.program_id not in out and x.verdict != "duplicate":
            out[x.program_id] = x.anchor
    return out
