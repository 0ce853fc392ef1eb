"""The offline operator's structural edits, one method per mutation kind.

Why a module of its own: the operator (:mod:`evolve.operators.offline.operator`) decides *which*
edit to try and checks the result against the caps and the language; the edits say *how*
a module's ``step_time`` changes. Every method draws only from the ``rng`` it is given, and
raises ``Retry`` (this random choice failed; try again) or ``Inapplicable`` (this kind
cannot act on this parent) instead of returning a bad program.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Sequence

import numpy as np

from evaluator.api import FEATURE_NAMES, FEATURES
from evolve.operators.base import Parent
from evolve.operators.offline import ast_edit as E

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

SAME_UNIT_PROB = 0.8

_UNARY_SWAP = {"sqrt": "log1p", "log1p": "sqrt"}
_UNWRAP_CALLS = ("maximum", "minimum", "where", "sqrt", "log", "log1p", "exp", "abs", "clip")


class Inapplicable(Exception):
    """This kind of edit has nothing to act on in this parent (or no room for constants)."""


class Retry(Exception):
    """This random choice did not work out; another try of the same kind may."""


def _pick(rng: np.random.Generator, items: Sequence):
    if not items:
        raise Retry("nothing to choose from")
    return items[int(rng.integers(len(items)))]



class Mutations:
    """The edits; mixed into :class:`evolve.operators.offline.operator.OfflineOperator`, which sets
    the caps below."""

    max_complexity: int
    max_where: int
    max_constants: int

    def _new_const(self, parts: E.ModuleParts, prefix: str, decl: E.ConstDecl) -> ast.Attribute:
        if len(parts.constants) >= self.max_constants:
            raise Inapplicable(f"constant cap {self.max_constants} reached")
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
            raise Inapplicable("no subexpression beyond literals and constants")
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
            raise Inapplicable("no feature to swap")
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
            raise Inapplicable("no sum to drop a term from")
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
            raise Inapplicable(f"where cap {self.max_where} reached")
        if len(parts.constants) + 2 > self.max_constants:
            raise Inapplicable("no room for two constants")
        room = self._room(parts)
        if room < 3:
            raise Inapplicable("no complexity left for a where")
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
                    or (name in ("maximum", "minimum") and isinstance(node, ast.Call)
                        and len(node.args) == 2)
                    or name in _UNARY_SWAP):
                sites.append(s)
        if not sites:
            raise Inapplicable("no operator to change")
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
            raise Inapplicable("nothing to unwrap")
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
            raise Retry(f"donor unreadable: {exc}") from exc
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
                raise Retry(f"donor reads undeclared c.{name}")
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
