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
breaks a cap, is a no-op or fails ``evolve.language.parse_program`` is retried up to
``max_tries`` times; a kind that cannot apply to the parent at all is replaced by another
kind. If every try fails, the proposal carries ``error`` and no source.

Interface: ``OfflineOperator(max_complexity=30, max_where=3, max_constants=10, max_tries=8,
weights=None, warm_start=False)``; ``.propose(parents, inspirations, rng, n) ->
list[Proposal]`` (``evolve.operators.base.Operator``). ``parent_ids`` is ``(parent,)`` or,
for crossover, ``(parent, donor)``.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from evaluator.glossary import FEATURE_NAMES, FEATURES
from evolve.errors import ProgramError
from evolve.language import MAX_COMPLEXITY, MAX_CONSTANTS, MAX_WHERE, parse_program
from evolve.operators import ast_edit as E
from evolve.operators.base import Parent, Proposal

UNITS: dict[str, str] = {e.name: e.unit for e in FEATURES}

# (init, low, high) of the coefficient of a new ``c.k * f.x`` term, by the unit of ``x``:
# a dimensionless scale on µs features; µs per request / token / layer / GPU otherwise.
TERM_BOUNDS: dict[str, E.ConstDecl] = {"us": (0.0, 0.0, 10.0)}
DEFAULT_TERM_BOUNDS: E.ConstDecl = (0.0, 0.0, 1000.0)
# (init, low, high) of a new ``where`` threshold on a feature of the given unit.
THRESHOLD_BOUNDS: dict[str, E.ConstDecl] = {
    "us": (1000.0, 0.0, 100000.0),
    "tokens": (2048.0, 0.0, 262144.0),
    "requests": (32.0, 0.0, 1024.0),
    "layers": (40.0, 0.0, 128.0),
    "GPUs": (1.5, 1.0, 8.0),
    "0/1": (0.5, 0.0, 1.0),
}
DEFAULT_THRESHOLD_BOUNDS: E.ConstDecl = (1.0, 0.0, 1000.0)
SCALE_BOUNDS: E.ConstDecl = (1.0, 0.0, 10.0)
CEILING_BOUNDS: E.ConstDecl = (100000.0, 0.0, 100000.0)  # µs; starts inactive

DEFAULT_WEIGHTS: dict[str, float] = {
    "swap_feature": 2.0, "add_term": 2.0, "drop_term": 1.5, "wrap_maximum": 1.0,
    "wrap_minimum": 0.5, "wrap_where": 1.0, "change_operator": 1.0, "scale": 1.0,
    "unwrap": 1.0, "crossover": 1.5,
}
MAX_NOTES = 3
MAX_NOTE_CHARS = 100
NOTE_PREFIX = "offline:"
SAME_UNIT_PROB = 0.8

_UNARY_SWAP = {"sqrt": "log1p", "log1p": "sqrt"}
_UNWRAP_CALLS = ("maximum", "minimum", "where", "sqrt", "log", "log1p", "exp", "abs", "clip")


class _Inapplicable(Exception):
    """This kind of edit has nothing to act on in this parent (or no room for constants)."""


class _Retry(Exception):
    """This random choice did not work out; another try of the same kind may."""


def _pick(rng: np.random.Generator, items: Sequence):
    if not items:
        raise _Retry("nothing to choose from")
    return items[int(rng.integers(len(items)))]


def _with_note(doc: str, note: str) -> str:
    """Docstring with old notes trimmed to the last ``MAX_NOTES - 1`` and ``note`` appended."""
    lines = doc.rstrip().splitlines()
    notes = [ln for ln in lines if ln.startswith(NOTE_PREFIX)]
    body = [ln for ln in lines if not ln.startswith(NOTE_PREFIX)]
    while body and not body[-1].strip():
        body.pop()
    notes = [*notes[-(MAX_NOTES - 1):], note]
    return "\n".join([*body, "", *notes] if body else notes) + "\n"


class OfflineOperator:
    """Deterministic structural mutations; see the module docstring for the kinds."""

    name = "offline"

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
            except _Inapplicable as exc:
                reason = f"{kind}: {exc}"
                kinds.remove(kind)
                kind = self._choose_kind(kinds, rng)
                continue
            except _Retry as exc:
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

    # ------------------------------------------------------------------ helpers
    def _new_const(self, parts: E.ModuleParts, prefix: str, decl: E.ConstDecl) -> ast.Attribute:
        if len(parts.constants) >= self.max_constants:
            raise _Inapplicable(f"constant cap {self.max_constants} reached")
        name = E.fresh_name(prefix, parts.constants)
        parts.constants[name] = decl
        return E.attr(E.CONST_PARAM, name)

    def _room(self, parts: E.ModuleParts) -> int:
        return self.max_complexity - E.parts_complexity(parts)

    @staticmethod
    def _value_slots(parts: E.ModuleParts) -> list[E.Slot]:
        """Subexpressions worth editing: not bare literals and not bare ``c.`` reads."""
        slots = [s for s in E.value_slots(parts.step_fn())
                 if not isinstance(s.node, ast.Constant)
                 and not E.is_param_attr(s.node, E.CONST_PARAM)]
        if not slots:
            raise _Inapplicable("no subexpression beyond literals and constants")
        return slots

    def _feature(self, parts: E.ModuleParts, rng: np.random.Generator) -> str:
        """A feature, half the time one the program does not read yet."""
        used = E.features_used(parts)
        unused = [f for f in FEATURE_NAMES if f not in used]
        if unused and rng.random() < 0.5:
            return _pick(rng, unused)
        return _pick(rng, FEATURE_NAMES)

    # ------------------------------------------------------------------ mutations
    # Each edits ``parts`` in place and returns a short note; ``ids`` collects parent ids.
    def _swap_feature(self, parts: E.ModuleParts, rng: np.random.Generator,
                      donors: list[Parent], ids: list[str]) -> str:
        nodes = E.feature_nodes(parts.step_fn())
        if not nodes:
            raise _Inapplicable("no feature to swap")
        node = _pick(rng, nodes)
        old = node.attr
        unit = UNITS.get(old, "")
        same = [f for f in FEATURE_NAMES if f != old and UNITS[f] == unit]
        other = [f for f in FEATURE_NAMES if f != old and UNITS[f] != unit]
        pool = same if same and (not other or rng.random() < SAME_UNIT_PROB) else other
        node.attr = _pick(rng, pool)
        return f"f.{old} -> f.{node.attr}"

    def _add_term(self, parts: E.ModuleParts, rng: np.random.Generator,
                  donors: list[Parent], ids: list[str]) -> str:
        slots = E.value_slots(parts.step_fn())
        roots = [s for s in slots if s.root]
        slot = _pick(rng, roots if rng.random() < 0.6 else slots)
        feature = self._feature(parts, rng)
        k = self._new_const(parts, "k", TERM_BOUNDS.get(UNITS[feature], DEFAULT_TERM_BOUNDS))
        term = E.binop(k, ast.Mult(), E.attr(E.FEATURE_PARAM, feature))
        slot.replace(E.binop(slot.node, ast.Add(), term))
        return f"+ c.{k.attr} * f.{feature}"

    def _drop_term(self, parts: E.ModuleParts, rng: np.random.Generator,
                   donors: list[Parent], ids: list[str]) -> str:
        sites = [s for s in E.value_slots(parts.step_fn())
                 if isinstance(s.node, ast.BinOp) and isinstance(s.node.op, ast.Add | ast.Sub)]
        if not sites:
            raise _Inapplicable("no sum to drop a term from")
        slot = _pick(rng, sites)
        node = slot.node
        assert isinstance(node, ast.BinOp)
        keep_left = isinstance(node.op, ast.Sub) or rng.random() < 0.5
        keep, dropped = (node.left, node.right) if keep_left else (node.right, node.left)
        slot.replace(keep)
        return f"dropped {E.short(dropped)}"

    def _wrap_maximum(self, parts: E.ModuleParts, rng: np.random.Generator,
                      donors: list[Parent], ids: list[str]) -> str:
        slot = _pick(rng, self._value_slots(parts))
        feature = self._feature(parts, rng)
        k = self._new_const(parts, "k", TERM_BOUNDS.get(UNITS[feature], DEFAULT_TERM_BOUNDS))
        floor = E.binop(k, ast.Mult(), E.attr(E.FEATURE_PARAM, feature))
        note = f"maximum({E.short(slot.node, 32)}, c.{k.attr} * f.{feature})"
        slot.replace(E.call("maximum", slot.node, floor))
        return note

    def _wrap_minimum(self, parts: E.ModuleParts, rng: np.random.Generator,
                      donors: list[Parent], ids: list[str]) -> str:
        slot = _pick(rng, self._value_slots(parts))
        m = self._new_const(parts, "m", CEILING_BOUNDS)
        note = f"minimum({E.short(slot.node, 32)}, c.{m.attr})"
        slot.replace(E.call("minimum", slot.node, m))
        return note

    def _wrap_where(self, parts: E.ModuleParts, rng: np.random.Generator,
                    donors: list[Parent], ids: list[str]) -> str:
        if E.n_where(parts) >= self.max_where:
            raise _Inapplicable(f"where cap {self.max_where} reached")
        if len(parts.constants) + 2 > self.max_constants:
            raise _Inapplicable("no room for two constants")
        room = self._room(parts)
        if room < 3:
            raise _Inapplicable("no complexity left for a where")
        slot = _pick(rng, self._value_slots(parts))
        expr = slot.node
        feature = _pick(rng, FEATURE_NAMES)
        t = self._new_const(parts, "t", THRESHOLD_BOUNDS.get(UNITS[feature],
                                                             DEFAULT_THRESHOLD_BOUNDS))
        s = self._new_const(parts, "s", SCALE_BOUNDS)
        cond = ast.Compare(left=E.attr(E.FEATURE_PARAM, feature), ops=[ast.Gt()],
                           comparators=[t])
        head = f"f.{feature} > c.{t.attr}"
        if E.complexity(expr) + 3 <= room and rng.random() < 0.5:
            # Two branches: later edits can give each regime its own structure.
            slot.replace(E.call("where", cond, expr, E.binop(s, ast.Mult(),
                                                             copy.deepcopy(expr))))
            return f"where({head}, e, c.{s.attr} * e), e = {E.short(expr, 32)}"
        # Compact: one copy of e times a regime factor.
        slot.replace(E.binop(expr, ast.Mult(),
                             E.call("where", cond, ast.Constant(1.0), s)))
        return f"e * where({head}, 1.0, c.{s.attr}), e = {E.short(expr, 32)}"

    def _change_operator(self, parts: E.ModuleParts, rng: np.random.Generator,
                         donors: list[Parent], ids: list[str]) -> str:
        sites = []
        for s in E.value_slots(parts.step_fn()):
            node, name = s.node, E.call_name(s.node)
            if ((isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub))
                    or (name in ("maximum", "minimum") and len(node.args) == 2)
                    or name in _UNARY_SWAP):
                sites.append(s)
        if not sites:
            raise _Inapplicable("no operator to change")
        slot = _pick(rng, sites)
        node = slot.node
        name = E.call_name(node)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Add):
                slot.replace(E.call("maximum", node.left, node.right))
                return "+ -> maximum"
            node.op = ast.Add()
            return "- -> +"
        assert isinstance(node, ast.Call) and name is not None
        if name in _UNARY_SWAP:
            node.func = ast.Name(id=_UNARY_SWAP[name], ctx=ast.Load())
            return f"{name} -> {_UNARY_SWAP[name]}"
        if name == "minimum" or rng.random() < 0.5:
            new = "maximum" if name == "minimum" else "minimum"
            node.func = ast.Name(id=new, ctx=ast.Load())
            return f"{name} -> {new}"
        slot.replace(E.binop(node.args[0], ast.Add(), node.args[1]))
        return "maximum -> +"

    def _scale(self, parts: E.ModuleParts, rng: np.random.Generator,
               donors: list[Parent], ids: list[str]) -> str:
        slot = _pick(rng, self._value_slots(parts))
        s = self._new_const(parts, "s", SCALE_BOUNDS)
        note = f"c.{s.attr} * ({E.short(slot.node, 40)})"
        slot.replace(E.binop(s, ast.Mult(), slot.node))
        return note

    def _unwrap(self, parts: E.ModuleParts, rng: np.random.Generator,
                donors: list[Parent], ids: list[str]) -> str:
        sites = []
        for s in E.value_slots(parts.step_fn()):
            node = s.node
            if E.call_name(node) in _UNWRAP_CALLS or (
                    isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
                    and (E.is_param_attr(node.left, E.CONST_PARAM)
                         or E.is_param_attr(node.right, E.CONST_PARAM))):
                sites.append(s)
        if not sites:
            raise _Inapplicable("nothing to unwrap")
        slot = _pick(rng, sites)
        node = slot.node
        if isinstance(node, ast.BinOp):
            keep = node.right if E.is_param_attr(node.left, E.CONST_PARAM) else node.left
            slot.replace(keep)
            return f"dropped factor of {E.short(keep, 40)}"
        assert isinstance(node, ast.Call)
        name = E.call_name(node)
        if name == "where":
            choices = node.args[1:3]
        elif name in ("maximum", "minimum"):
            choices = node.args
        else:
            choices = node.args[:1]
        keep = _pick(rng, choices)
        slot.replace(keep)
        return f"{name}(...) -> {E.short(keep, 40)}"

    def _crossover(self, parts: E.ModuleParts, rng: np.random.Generator,
                   donors: list[Parent], ids: list[str]) -> str:
        donor = _pick(rng, donors)
        try:
            donor_parts = E.split_module(donor.program.source)
        except ValueError as exc:
            raise _Retry(f"donor unreadable: {exc}") from exc
        target = _pick(rng, self._value_slots(parts))
        room = self._room(parts) + E.complexity(target.node)
        pieces: list[ast.expr] = []
        for value in E.inlined_values(donor_parts.step_fn()):
            pieces += [x for x in E.sub_exprs(value)
                       if E.feature_nodes(x) and E.complexity(x) <= room]
        piece = copy.deepcopy(_pick(rng, pieces))
        mapping: dict[str, str] = {}
        for name in E.const_refs(piece):
            if name not in donor_parts.constants:
                raise _Retry(f"donor reads undeclared c.{name}")
            new = name
            if new in parts.constants or new in E.RESERVED_CONSTANTS:
                new = E.fresh_name(f"{name}_", parts.constants)
            mapping[name] = new
            parts.constants[new] = donor_parts.constants[name]
        E.rename_consts(piece, mapping)
        note = f"{E.short(target.node, 24)} <- {E.short(piece, 40)}"
        target.replace(piece)
        ids.append(donor.program.id)
        return f"{note} (from {donor.program.id[:12]})"
