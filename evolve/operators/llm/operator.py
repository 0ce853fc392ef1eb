"""The LLM mutation/crossover operator: prompts an OpenAI-compatible endpoint for programs.

Determinism: every choice – mutate or crossover, which parents, which inspirations, the
``seed`` sent with the request – is drawn from the ``rng`` the loop passes, sequentially and
before any request is sent, so the canonical requests (and their cassette keys) depend on
the run seed only. Requests then run on a bounded thread pool; results are put back in
request order, and accounting is updated in that order after the batch.

Stopping, and what the loop should catch:

* :class:`BudgetExhausted` is raised at the *start* of ``propose`` once the token or cost
  budget has been reached (never mid-batch: where a batch would be cut would depend on
  thread timing). A batch may therefore overshoot a budget by at most one batch. Budgets
  count replayed calls at their recorded usage, so a replay stops exactly where the recorded
  run stopped; replayed calls are *billed* at 0 (``usage.cost_usd``, ``llm_call.cost_usd``).
* When every request of a batch fails at the endpoint (unreachable after all retries, or
  rejected: bad key, unknown model), the batch's error proposals are returned and
  ``on_failure`` decides: ``"offline"`` – later batches come from the offline operator
  built by the ``fallback`` factory the caller passes (the run's own complexity cap and
  limits; a default ``OfflineOperator()`` only when none is given);
  ``"stop"`` – :class:`LLMUnavailable` is raised, carrying the batch's proposals.
* :class:`evolve.operators.llm.cassette.CassetteError` (replay miss, corrupt cassette) and
  :class:`evolve.operators.llm.prompting.HeldoutLeak` propagate: both must stop the run.

Everything else – malformed replies, timeouts, 5xx after retries for some requests – comes
back as a :class:`Proposal` with ``source=None`` and ``error`` set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evolve.config.llm import LLMConfig
from evolve.errors import BudgetExhausted, LLMUnavailable
from evolve.operators.base import ExchangeStore, Operator, Parent, Proposal
from evolve.operators.llm.cassette import Cassette, canonical_request, request_hash
from evolve.operators.llm.endpoint import ENDPOINT_FAILURES, OK, Endpoint, Exchange, cap_reply
from evolve.operators.llm.prompting import (
    TEMPLATE_VERSION,
    Prompt,
    PromptTooLarge,
    build_prompt,
    estimate_tokens,
)
from evolve.operators.llm.replies import extract_program
from evolve.operators.llm.term import extract_term, splice_term, term_room
from evolve.program.whitelist import MAX_CONSTANTS
from evolve.text.untrusted import mask_secrets

log = logging.getLogger("evolve.llm")
_SEED_SPAN = 2**31 - 1


@dataclass
class Usage:
    """Running totals of one operator (one run). ``cost_usd`` is what was billed; the
    ``counted_*`` figures include replayed calls and are what budgets are checked against."""

    calls: int = 0
    cached_calls: int = 0
    failed_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    counted_tokens: int = 0
    counted_cost_usd: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class _Plan:
    """One request, fully decided before anything is sent."""

    index: int
    kind: str
    parents: tuple[Parent, ...]
    prompt: Prompt | None
    prompt_error: str | None
    seed: int | None
    request: dict[str, Any] | None
    request_hash: str | None
    room: int | None = None  # constants the term may bring (term form), else None


class LLMOperator:
    """``Operator`` backed by an OpenAI-compatible chat endpoint (see module doc)."""

    name = "llm"

    def __init__(self, cfg: LLMConfig, heldout: Collection[str] = (),
                 fallback: Callable[[], Operator] | None = None):
        if not cfg.model:
            raise ValueError("llm config: model is empty (use the offline operator instead)")
        self.cfg = cfg
        self.heldout = frozenset(heldout)
        self._make_fallback = fallback or _offline_operator
        self.usage = Usage()
        # consecutive batches every request of which failed at the endpoint before
        # ``on_failure`` acts: 1 for the LLM alone; the mixer sets more (its batches are a
        # request or two, and one slow reply must not end the LLM's part of a run)
        self.fail_batches = 1
        self._failed_batches = 0
        self.cassette = (Cassette(cfg.cassette, cfg.cassette_mode)
                         if cfg.cassette_mode != "off" and cfg.cassette else None)
        self._endpoint: Endpoint | None = None
        self._fallback: Operator | None = None
        # Set by the loop: keeps each finished exchange of the generation in progress
        # (``exchange(index, hash)`` / ``put_exchange(index, hash, exchange, cached)``),
        # so replies paid for before a kill are not asked for (and paid) again on resume.
        self.journal: ExchangeStore | None = None

    def attach_journal(self, journal: ExchangeStore) -> None:
        self.journal = journal

    @property
    def fallen_back(self) -> bool:
        return self._fallback is not None

    def close(self) -> None:
        if self._endpoint is not None:
            self._endpoint.close()
            self._endpoint = None

    def propose(self, parents: Sequence[Parent], inspirations: Sequence[Parent],
                rng: np.random.Generator, n: int) -> list[Proposal]:
        if self._fallback is not None:
            return self._fallback.propose(parents, inspirations, rng, n)
        if n <= 0:
            return []
        if not parents:
            raise ValueError("LLMOperator.propose needs at least one parent")
        self._check_budget()
        plans = self.plan(parents, inspirations, rng, n)
        return self.finish(plans, self.send(plans))

    # The three steps of ``propose``, for callers that send a batch early and collect it
    # later (:class:`evolve.operators.llm.mixed.MixedOperator`'s overlap): ``plan`` draws
    # everything from ``rng``, ``send`` may run on another thread (nothing of the operator's
    # state but the endpoint is touched there), ``finish`` accounts in request order.
    def plan(self, parents: Sequence[Parent], inspirations: Sequence[Parent],
             rng: np.random.Generator, n: int) -> list[_Plan]:
        """The ``n`` requests of a batch, decided (and their rng draws made) up front.

        Every ``replies_per_prompt`` consecutive requests share one prompt (the first's
        parents and inspirations) and differ by their seed only: sent back to back, a
        server that caches prompt prefixes reads the prompt once (on the local model the
        second reply costs about a third of the first)."""
        if not parents:
            raise ValueError("LLMOperator.plan needs at least one parent")
        plans: list[_Plan] = []
        for i in range(n):
            if i % self.cfg.replies_per_prompt:
                plans.append(self._sibling(i, plans[-1], rng))
            else:
                plans.append(self._plan(i, parents, inspirations, rng))
        return plans

    def send(self, plans: list[_Plan], journal: bool = True
             ) -> list[tuple[Exchange, bool] | None]:
        """The exchanges of ``plans``, in request order (``journal``: serve and keep them
        in the generation's journal; off for a batch sent ahead of its generation)."""
        return self._run(plans, journal)

    def finish(self, plans: list[_Plan], exchanges: list[tuple[Exchange, bool] | None]
               ) -> list[Proposal]:
        """The proposals of a sent batch, accounted in request order; a batch whose every
        request failed at the endpoint triggers ``on_failure``."""
        proposals = [self._proposal(p, ex) for p, ex in zip(plans, exchanges, strict=True)]
        sent = [ex for ex, _ in (e for e in exchanges if e is not None)]
        if sent and len(sent) == len(plans) and all(
                ex.status in ENDPOINT_FAILURES for ex in sent):
            self._failed_batches += 1
            if self._failed_batches >= self.fail_batches:
                self._endpoint_failed(proposals, sent[0].error or "")
        elif sent:
            self._failed_batches = 0
        return proposals

    def budget_left(self) -> bool:
        """Whether the token and cost budgets allow another batch."""
        try:
            self._check_budget()
        except BudgetExhausted:
            return False
        return True

    # -- planning (main thread, consumes rng in a fixed order) -----------------------------

    def _plan(self, index: int, parents: Sequence[Parent], inspirations: Sequence[Parent],
              rng: np.random.Generator) -> _Plan:
        first = parents[index % len(parents)]
        term = self.cfg.form() == "term"
        if term and not term_room(first.program.n_constants):
            # at the constants cap a term can add nothing: the next parent with room
            roomy = [parents[(index + k) % len(parents)] for k in range(1, len(parents))]
            first = next((p for p in roomy if term_room(p.program.n_constants)), first)
        # Crossover partners: other parents with a different program (the selection may
        # repeat a program); with none, the child is a mutation.
        others = [p for p in parents if _pid(p) != _pid(first)]
        crossover = bool(rng.random() < self.cfg.crossover_prob) and bool(others)
        chosen = [first]
        if crossover:
            chosen.append(others[int(rng.integers(len(others)))])
        ids = {_pid(p) for p in chosen}
        pool = [q for q in inspirations if _pid(q) not in ids]
        k = min(self.cfg.n_inspirations, len(pool))
        picks = sorted(int(i) for i in rng.choice(len(pool), size=k, replace=False)) if k else []
        seed = self._seed(rng)
        kind = "crossover" if crossover else "mutate"
        room = term_room(first.program.n_constants) if term else None
        if room == 0:
            return _Plan(index, kind, tuple(chosen), None,
                         f"no parent has room for a term: each has {MAX_CONSTANTS} constants",
                         seed, None, None)
        try:
            prompt = build_prompt(kind, chosen, [pool[i] for i in picks],  # type: ignore[arg-type]
                                  self.cfg.prompt_token_cap, self.heldout,
                                  profile=self.cfg.profile(), form=self.cfg.form())
        except PromptTooLarge as exc:
            return _Plan(index, kind, tuple(chosen), None, str(exc), seed, None, None)
        request = canonical_request(self.cfg.model, prompt.messages, self.cfg.temperature,
                                    seed, self.cfg.max_tokens, TEMPLATE_VERSION,
                                    self.cfg.constrain, self.cfg.form(), room)
        return _Plan(index, kind, tuple(chosen), prompt, None, seed, request,
                     request_hash(request), room)

    def _sibling(self, index: int, first: _Plan, rng: np.random.Generator) -> _Plan:
        """Request ``index``: ``first``'s prompt with a seed of its own."""
        seed = self._seed(rng)
        if first.prompt is None:
            return _Plan(index, first.kind, first.parents, None, first.prompt_error, seed,
                         None, None)
        request = canonical_request(self.cfg.model, first.prompt.messages,
                                    self.cfg.temperature, seed, self.cfg.max_tokens,
                                    TEMPLATE_VERSION, self.cfg.constrain, self.cfg.form(),
                                    first.room)
        return _Plan(index, first.kind, first.parents, first.prompt, None, seed, request,
                     request_hash(request), first.room)

    def _seed(self, rng: np.random.Generator) -> int | None:
        raw_seed = int(rng.integers(0, _SEED_SPAN))
        return (raw_seed + self.cfg.seed) % _SEED_SPAN if self.cfg.send_seed else None

    # -- sending (worker threads) ----------------------------------------------------------

    def _run(self, plans: list[_Plan], journal: bool = True
             ) -> list[tuple[Exchange, bool] | None]:
        todo = [p for p in plans if p.request is not None]
        out: list[tuple[Exchange, bool] | None] = [None] * len(plans)
        if not todo:
            return out
        replaying = self.cassette is not None and self.cassette.mode == "replay"
        if not replaying and self._endpoint is None:
            self._endpoint = Endpoint(self.cfg)
        workers = max(1, min(self.cfg.concurrency, len(todo)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm") as pool:
            futures = [(p.index, pool.submit(self._exchange, p, journal)) for p in todo]
        for index, fut in futures:  # re-raises the first failure by request index
            out[index] = fut.result()
        return out

    def _exchange(self, plan: _Plan, use_journal: bool = True) -> tuple[Exchange, bool]:
        assert plan.request is not None and plan.request_hash is not None
        cap = self.cfg.max_reply_bytes  # a cassette or journal may hold a longer reply
        if self.cassette is not None and self.cassette.mode == "replay":
            return cap_reply(Exchange.from_dict(self.cassette.get(plan.request_hash)), cap), True
        journal = self.journal if use_journal else None
        if journal is not None:
            kept = journal.exchange(plan.index, plan.request_hash)
            if kept is not None:  # answered before the run was interrupted
                return (cap_reply(Exchange.from_dict(kept["exchange"]), cap),
                        bool(kept["cached"]))
        assert self._endpoint is not None
        exchange = self._endpoint.complete(plan.request, estimate_tokens)
        if self.cassette is not None and self.cassette.mode == "record":
            self.cassette.put(plan.request_hash, plan.request, exchange.to_dict())
        if journal is not None:
            journal.put_exchange(plan.index, plan.request_hash, exchange.to_dict(), False)
        return exchange, False

    # -- results (main thread, request order) ----------------------------------------------

    def _proposal(self, plan: _Plan, result: tuple[Exchange, bool] | None) -> Proposal:
        operator = f"llm:{plan.kind}"
        parent_ids = tuple(_pid(p) for p in plan.parents)
        if result is None:
            return Proposal(None, operator, parent_ids, error=plan.prompt_error)
        exchange, cached = result
        source, error, status = None, exchange.error, exchange.status
        note = None  # an OK exchange's error says why its reply was cut (cap_reply)
        if exchange.status == OK:
            parent_source = str(plan.parents[0].program.source)
            if self.cfg.form() == "term":
                found = extract_term(exchange.reply)
                source, error = found.source, found.error
                if source is not None:
                    source, error = splice_term(parent_source, source,
                                                plan.parents[0].constants)
                operator = "llm:term" + ("-crossover" if plan.kind == "crossover" else "")
            else:
                found = extract_program(exchange.reply, parent_source)
                source, error = found.source, found.error
            note = exchange.error
            if error and exchange.finish_reason == "length":
                error += " (reply truncated at max_tokens)"
            status = OK if source is not None else "no_program"
        call = self._account(plan, exchange, cached, status,
                             "; ".join(x for x in (error, note) if x) or None)
        return Proposal(source, operator, parent_ids, error=error, llm_call=call)

    def _account(self, plan: _Plan, ex: Exchange, cached: bool, status: str,
                 error: str | None) -> dict[str, Any]:
        cost = self.cfg.cost_usd(ex.prompt_tokens, ex.completion_tokens)
        u = self.usage
        u.calls += 1
        u.cached_calls += int(cached)
        u.failed_calls += int(ex.status != OK)
        u.counted_tokens += ex.prompt_tokens + ex.completion_tokens
        u.counted_cost_usd += cost
        if not cached:
            u.prompt_tokens += ex.prompt_tokens
            u.completion_tokens += ex.completion_tokens
            u.cost_usd += cost
        assert plan.prompt is not None
        return {
            "request_hash": plan.request_hash, "model": self.cfg.model,
            "template_version": TEMPLATE_VERSION, "prompt_tokens": ex.prompt_tokens,
            "completion_tokens": ex.completion_tokens, "cost_usd": 0.0 if cached else cost,
            "latency_s": ex.latency_s, "status": status, "reply": ex.reply, "error": error,
            "cached": cached,
            # Beyond the contract (the loop may store or drop them):
            "recorded_cost_usd": cost, "kind": plan.kind, "seed": plan.seed,
            "attempts": ex.attempts, "finish_reason": ex.finish_reason,
            "usage_estimated": ex.usage_estimated, "prompt_estimate": plan.prompt.tokens,
            "prompt_cuts": dict(plan.prompt.cuts),
        }

    def _check_budget(self) -> None:
        u, cfg = self.usage, self.cfg
        if cfg.max_total_tokens is not None and u.counted_tokens >= cfg.max_total_tokens:
            raise BudgetExhausted(f"LLM token budget spent: {u.counted_tokens} of "
                                  f"{cfg.max_total_tokens} tokens")
        if cfg.max_cost_usd is not None and u.counted_cost_usd >= cfg.max_cost_usd:
            raise BudgetExhausted(f"LLM cost budget spent: ${u.counted_cost_usd:.4f} of "
                                  f"${cfg.max_cost_usd:.4f}")

    def _endpoint_failed(self, proposals: list[Proposal], error: str) -> None:
        where = f"{self.cfg.model} at {mask_secrets(self.cfg.base_url)}"
        if self.cfg.on_failure == "stop":
            raise LLMUnavailable(f"LLM endpoint failed every request of a batch ({where}): "
                                 f"{error}", proposals)
        log.warning("LLM endpoint failed every request of a batch (%s): %s; switching to "
                    "the offline operator", where, error)
        self._fallback = self._make_fallback()
        self.close()


def _offline_operator() -> Operator:
    # Imported lazily: the offline operator is a sibling module that must not be a hard
    # dependency of this one (and vice versa).
    from evolve.operators.offline.operator import OfflineOperator

    return OfflineOperator()


def _pid(p: Parent) -> str:
    return str(p.program.id)


def build_llm_operator(cfg: LLMConfig, heldout: Collection[str] = (),
                       fallback: Callable[[], Operator] | None = None) -> Operator:
    """The operator for ``cfg``: pass ``heldout`` (validate/test run names) so prompts are
    checked never to mention them, and ``fallback`` (a factory of the run's offline
    operator) for ``on_failure = "offline"``."""
    return LLMOperator(cfg, heldout=heldout, fallback=fallback)
