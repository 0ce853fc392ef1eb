"""The offline operator: deterministic AST mutations and crossover, no endpoint needed.

Why: ``evolve run`` must work (and be testable, bit for bit) without an LLM. Each proposal
applies one structural edit to a parent program, chosen with the passed ``rng`` only, and
returns the new module text; the loop validates, fits and scores it like any other.

Mutations (recorded as ``Proposal.operator == "offline:<kind>"``):

* ``swap_feature``  – replace one ``f.x`` by another feature, preferring the same unit.
* ``add_term``      – ``e`` -> ``e + c.kN * f.x``; ``kN`` starts at 0 (the term starts
  absent), bounds by the feature's unit (:data:`TERM_BOUNDS`).
* ``drop_term``     – ``a + b`` -> ``a`` or ``b``; ``a - b`` -> ``a``.
* ``wrap_maximum``  – ``e`` -> ``maximum(e, c.kN * f.x)`` with ``kN`` starting at 0.
* ``wrap_minimum``  – ``e`` -> ``minimum(e, c.mN)``, a ceiling starting at its upper bound.
* ``wrap_where``    – ``e`` -> ``where(f.x > c.tN, e, c.sN * e)`` (two branches later
  edits can make differ) or ``e * where(f.x > c.tN, 1.0, c.sN)`` (compact): a regime split
  on a new threshold (:data:`THRESHOLD_BOUNDS`) with a new scale starting at 1.
* ``change_operator`` – ``+`` -> ``maximum``, ``-`` -> ``+``, ``maximum`` -> ``+`` or
  ``minimum``, ``minimum`` -> ``maximum``, ``sqrt`` <-> ``log1p``.
* ``scale``         – ``e`` -> ``c.sN * e``, ``sN`` starting at 1 in [0, 10].
* ``unwrap``        – the inverse of the wraps and scale: keep one argument of a call or
  drop a ``c.* *`` factor; lets the search simplify.
* ``crossover``     – replace a subexpression by one of another parent/inspiration (its
  locals inlined), carrying its constants, renamed on a clash.

New constants start where their edit is neutral (a zero term, a unit scale, an inactive
ceiling), so those edits alone do not make the parent worse before fitting. Only
``step_time`` is edited; ``queueing_time`` is kept as it is. After every edit, dead locals
and unreferenced constants (except the reserved E2E offsets) are removed and a one-line
note is appended to the docstring (the last :data:`MAX_NOTES` notes are kept).

Caps: complexity, ``where`` count and constant count (constructor args). An edit that
breaks a cap, is a no-op or fails ``evolve.program.language.parse_program`` is retried up to
``max_tries`` times; a kind that cannot apply to the parent at all is replaced by another
kind. If every try fails, the proposal carries ``error`` and no source.

Interface: ``OfflineOperator(max_complexity=30, max_where=3, max_constants=10, max_tries=8,
weights=None, warm_start=False)``; ``.propose(parents, inspirations, rng, n) ->
list[Proposal]`` (``evolve.operators.base.Operator``). ``parent_ids`` is ``(parent,)`` or,
for crossover, ``(parent, donor)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from evolve.errors import ProgramError
from evolve.operators.base import ExchangeStore, Parent, Proposal
from evolve.operators.offline import ast_edit as E
from evolve.operators.offline.mutations import Inapplicable, Mutations, Retry
from evolve.program.language import MAX_COMPLEXITY, MAX_CONSTANTS, MAX_WHERE, parse_program

DEFAULT_WEIGHTS: dict[str, float] = {
    "swap_feature": 2.0, "add_term": 2.0, "drop_term": 1.5, "wrap_maximum": 1.0,
    "wrap_minimum": 0.5, "wrap_where": 1.0, "change_operator": 1.0, "scale": 1.0,
    "unwrap": 1.0, "crossover": 1.5,
}
MAX_NOTES = 3
MAX_NOTE_CHARS = 100
NOTE_PREFIX = "offline:"


def _with_note(doc: str, note: str) -> str:
    """Docstring with old notes trimmed to the last ``MAX_NOTES - 1`` and ``note`` appended."""
    lines = doc.rstrip().splitlines()
    notes = [ln for ln in lines if ln.startswith(NOTE_PREFIX)]
    body = [ln for ln in lines if not ln.startswith(NOTE_PREFIX)]
    while body and not body[-1].strip():
        body.pop()
    notes = [*notes[-(MAX_NOTES - 1):], note]
    return "\n".join([*body, "", *notes] if body else notes) + "\n"


class OfflineOperator(Mutations):
    """Deterministic structural mutations; see the module docstring for the kinds."""

    name = "offline"

    def attach_journal(self, journal: ExchangeStore) -> None:
        """Nothing to keep: offline proposals are recomputed from the seed on resume."""

    def __init__(self, max_complexity: int = MAX_COMPLEXITY, max_where: int = MAX_WHERE,
                 max_constants: int = MAX_CONSTANTS,
                 max_tries: int = 8, weights: Mapping[str, float] | None = None,
                 warm_start: bool = False) -> None:
        """``weights``: relative frequency per kind (missing kinds keep their default;
        0 disables one). ``warm_start``: inherited constants start at the parent's fitted
        value (median over groups, clipped to bounds) instead of the parent's declared init.
        """
        unknown = sorted(set(weights or {}) - set(DEFAULT_WEIGHTS))
        if unknown:
            raise ValueError(f"unknown mutation kinds: {unknown}")
        self.max_complexity = max_complexity
        self.max_where = max_where
        self.max_constants = max_constants
        self.max_tries = max_tries
        self.weights = {**DEFAULT_WEIGHTS, **(weights or {})}
        self.warm_start = warm_start
        self._kinds: dict[str, Callable[..., str]] = {
            "swap_feature": self._swap_feature, "add_term": self._add_term,
            "drop_term": self._drop_term, "wrap_maximum": self._wrap_maximum,
            "wrap_minimum": self._wrap_minimum, "wrap_where": self._wrap_where,
            "change_operator": self._change_operator, "scale": self._scale,
            "unwrap": self._unwrap, "crossover": self._crossover,
        }

    # ------------------------------------------------------------------ protocol
    def propose(self, parents: Sequence[Parent], inspirations: Sequence[Parent],
                rng: np.random.Generator, n: int) -> list[Proposal]:
        """``n`` proposals; proposal ``i`` mutates ``parents[i % len(parents)]``.

        Crossover donors are the other parents and the inspirations (distinct ids).
        """
        if not parents:
            raise ValueError("OfflineOperator.propose needs at least one parent")
        pool: list[Parent] = []
        for p in [*parents, *inspirations]:
            if all(q.program.id != p.program.id for q in pool):
                pool.append(p)
        out = []
        for i in range(n):
            parent = parents[i % len(parents)]
            donors = [q for q in pool if q.program.id != parent.program.id]
            out.append(self._propose_one(parent, donors, rng))
        return out

    # ------------------------------------------------------------------ driver
    def _propose_one(self, parent: Parent, donors: list[Parent],
                     rng: np.random.Generator) -> Proposal:
        pid = parent.program.id
        try:
            base = E.split_module(parent.program.source)
        except ValueError as exc:
            return Proposal(None, f"{self.name}:parse", (pid,), error=str(exc))
        if self.warm_start:
            self._apply_warm_start(base, parent)
        kinds = [k for k in self._kinds if self.weights[k] > 0 and (k != "crossover" or donors)]
        kind = self._choose_kind(kinds, rng)
        reason = "no applicable mutation"
        for _ in range(self.max_tries):
            if kind is None:
                break
            child = base.clone()
            ids = [pid]
            try:
                note = self._kinds[kind](child, rng, donors, ids)
            except Inapplicable as exc:
                reason = f"{kind}: {exc}"
                kinds.remove(kind)
                kind = self._choose_kind(kinds, rng)
                continue
            except Retry as exc:
                reason = f"{kind}: {exc}"
                continue
            E.cleanup(child)
            if child.structure() == base.structure():
                reason = f"{kind}: no change"
                continue
            child.doc = _with_note(child.doc, f"{NOTE_PREFIX}{kind}: {note}"[:MAX_NOTE_CHARS])
            source = child.render()
            violation = self._violation(child, source)
            if violation is None:
                return Proposal(source, f"{self.name}:{kind}", tuple(ids))
            reason = f"{kind}: {violation}"
        label = kind if kind is not None else "none"
        return Proposal(None, f"{self.name}:{label}", (pid,),
                        error=f"no valid child after {self.max_tries} tries; last: {reason}")

    def _choose_kind(self, kinds: list[str], rng: np.random.Generator) -> str | None:
        if not kinds:
            return None
        w = np.array([self.weights[k] for k in kinds], dtype=np.float64)
        return kinds[int(rng.choice(len(kinds), p=w / w.sum()))]

    def _violation(self, child: E.ModuleParts, source: str) -> str | None:
        """Why ``child`` breaks a cap or the language, or None if it is fine."""
        try:
            program = parse_program(source)
        except ProgramError as exc:
            return f"invalid program: {exc}"
        cx, nw, nc = program.complexity, program.n_where, len(program.constants)
        if cx > self.max_complexity:
            return f"complexity {cx} > cap {self.max_complexity}"
        if nw > self.max_where:
            return f"{nw} where calls > cap {self.max_where}"
        if nc > self.max_constants:
            return f"{nc} constants > cap {self.max_constants}"
        return None

    def _apply_warm_start(self, parts: E.ModuleParts, parent: Parent) -> None:
        for name, (init, low, high) in list(parts.constants.items()):
            values = [g[name] for _, g in sorted(parent.constants.items()) if name in g]
            if values:
                init = float(np.clip(np.median(values), low, high))
            parts.constants[name] = (init, low, high)
