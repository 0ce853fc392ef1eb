"""Structural editing of step-time program modules on the plain ``ast`` level.

Why a separate module: the offline operator needs the same few edits whatever mutation it
applies – find a subexpression, replace it, declare a constant, drop dead code, re-render the
module – and those are easier to test and reuse apart from the choice of mutation.

This module only guarantees a syntactically valid module with the expected layout
(docstring, ``CONSTANTS = {name: (init, low, high)}``, functions). The whitelist, caps and
normalisation that count are ``evolve.program.language.parse_program``'s.

* :class:`ModuleParts` – ``doc``, ordered ``constants`` and the function definitions;
  ``split_module(source)`` parses, ``ModuleParts.render()`` writes text back.
* :class:`Slot` – a place in an expression tree that can be read and replaced;
  ``value_slots(fn)`` lists every numeric subexpression of a function, statement by
  statement, in a fixed (source) order.
* ``complexity`` / ``n_where`` count like the language (operator, comparison and call nodes).
* ``cleanup(parts)`` removes dead local assignments and constants nobody references.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeGuard

# Constants the evaluator reads itself (E2E-only offsets); never removed as "unused".
RESERVED_CONSTANTS: tuple[str, ...] = ("post_decode_us", "output_token_us")
STEP_FN = "step_time"
CONST_PARAM = "c"
FEATURE_PARAM = "f"

ConstDecl = tuple[float, float, float]  # (init, low, high)


@dataclass
class ModuleParts:
    """A program module taken apart: docstring, constants in declaration order, functions."""

    doc: str
    constants: dict[str, ConstDecl]
    functions: list[ast.FunctionDef]

    def step_fn(self) -> ast.FunctionDef:
        for fn in self.functions:
            if fn.name == STEP_FN:
                return fn
        raise ValueError(f"no {STEP_FN} function")

    def clone(self) -> ModuleParts:
        return ModuleParts(self.doc, dict(self.constants), copy.deepcopy(self.functions))

    def structure(self) -> tuple[str, tuple[str, ...]]:
        """Functions and constant names, ignoring doc and bounds: equal means 'same program'."""
        dumps = "\n".join(ast.dump(fn) for fn in self.functions)
        return dumps, tuple(self.constants)

    def render(self) -> str:
        """Module text: docstring, one constant per line, then the functions."""
        lines = [_doc_literal(self.doc), ""]
        if self.constants:
            lines.append("CONSTANTS = {")
            for name, (init, low, high) in self.constants.items():
                lines.append(f'    "{name}": ({_num(init)}, {_num(low)}, {_num(high)}),')
            lines.append("}")
        else:
            lines.append("CONSTANTS = {}")
        for fn in self.functions:
            lines += ["", "", ast.unparse(ast.fix_missing_locations(fn))]
        return "\n".join(lines) + "\n"


def _num(x: float) -> str:
    return repr(float(x))


def _doc_literal(doc: str) -> str:
    if '"""' in doc or "\\" in doc or doc.endswith('"'):
        return repr(doc)
    return f'"""{doc}"""'


def split_module(source: str) -> ModuleParts:
    """Parse program text into :class:`ModuleParts`; ``ValueError`` on an unexpected layout."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"syntax error: {exc.msg} (line {exc.lineno})") from exc
    doc = ""
    constants: dict[str, ConstDecl] = {}
    functions: list[ast.FunctionDef] = []
    for i, stmt in enumerate(tree.body):
        if (i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)):
            doc = stmt.value.value
        elif (declared := constants_of(stmt)) is not None:
            constants = declared
        elif isinstance(stmt, ast.FunctionDef):
            functions.append(stmt)
        else:
            raise ValueError(f"unexpected top-level statement at line {stmt.lineno}")
    parts = ModuleParts(doc, constants, functions)
    parts.step_fn()  # raises if missing
    return parts


def constants_of(stmt: ast.stmt) -> dict[str, ConstDecl] | None:
    """The declarations of a ``CONSTANTS = {name: (init, low, high)}`` statement; ``None``
    for any other statement, ``ValueError`` when the dict is not of triples."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == "CONSTANTS"):
        return None
    try:
        raw = ast.literal_eval(stmt.value)
        return {str(k): (float(v[0]), float(v[1]), float(v[2])) for k, v in raw.items()}
    except (ValueError, TypeError, IndexError, AttributeError, KeyError) as exc:
        raise ValueError(f"CONSTANTS is not a dict of (init, low, high): {exc}") from exc


@dataclass(frozen=True)
class Slot:
    """A replaceable position: ``getattr(owner, field)`` or ``getattr(owner, field)[index]``."""

    owner: ast.AST
    field: str
    index: int | None
    root: bool  # the whole value of an assignment or return

    @property
    def node(self) -> ast.expr:
        value = getattr(self.owner, self.field)
        return value if self.index is None else value[self.index]

    def replace(self, new: ast.expr) -> None:
        if self.index is None:
            setattr(self.owner, self.field, new)
        else:
            getattr(self.owner, self.field)[self.index] = new


def call_name(node: ast.AST) -> str | None:
    """``name`` for a call ``name(...)``, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id
    return None


def is_param_attr(node: ast.AST, param: str) -> TypeGuard[ast.Attribute]:
    """True for ``<param>.<name>``, e.g. ``f.kv_read`` or ``c.alpha``."""
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id == param)


def _expr_slots(owner: ast.AST, field: str, index: int | None, root: bool) -> Iterator[Slot]:
    slot = Slot(owner, field, index, root)
    node = slot.node
    if isinstance(node, ast.Compare):
        return  # a where condition, not a numeric value
    yield slot
    if isinstance(node, ast.BinOp):
        yield from _expr_slots(node, "left", None, False)
        yield from _expr_slots(node, "right", None, False)
    elif isinstance(node, ast.UnaryOp):
        yield from _expr_slots(node, "operand", None, False)
    elif isinstance(node, ast.Call):
        for i in range(len(node.args)):
            yield from _expr_slots(node, "args", i, False)


def value_slots(fn: ast.FunctionDef) -> list[Slot]:
    """Every numeric subexpression of ``fn`` (pre-order, statement order)."""
    out: list[Slot] = []
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign | ast.Return) and stmt.value is not None:
            out.extend(_expr_slots(stmt, "value", None, True))
    return out


def sub_exprs(expr: ast.expr) -> list[ast.expr]:
    """``expr`` and every numeric subexpression of it (pre-order; no where conditions)."""
    return [s.node for s in _expr_slots(ast.Return(value=expr), "value", None, True)]


def feature_nodes(node: ast.AST) -> list[ast.Attribute]:
    """All ``f.<feature>`` reads under ``node`` (including inside where conditions)."""
    return [n for n in _walk(node) if is_param_attr(n, FEATURE_PARAM)]


def const_refs(node: ast.AST) -> list[str]:
    """Names of ``c.<constant>`` reads under ``node``, first occurrence order, no repeats."""
    seen: list[str] = []
    for n in _walk(node):
        if is_param_attr(n, CONST_PARAM) and n.attr not in seen:
            seen.append(n.attr)
    return seen


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Pre-order walk in field order (``ast.walk`` is breadth-first)."""
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _walk(child)


def complexity(node: ast.AST) -> int:
    """Number of operator, comparison and call nodes (the language's complexity measure)."""
    return sum(isinstance(n, ast.BinOp | ast.UnaryOp | ast.Call | ast.Compare)
               for n in _walk(node))


def parts_complexity(parts: ModuleParts) -> int:
    return sum(complexity(fn) for fn in parts.functions)


def n_where(parts: ModuleParts) -> int:
    return sum(call_name(n) == "where" for fn in parts.functions for n in _walk(fn))


def features_used(parts: ModuleParts) -> list[str]:
    names: list[str] = []
    for n in feature_nodes(parts.step_fn()):
        if n.attr not in names:
            names.append(n.attr)
    return names


def attr(param: str, name: str) -> ast.Attribute:
    return ast.Attribute(value=ast.Name(id=param, ctx=ast.Load()), attr=name, ctx=ast.Load())


def call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=[])


def binop(left: ast.expr, op: ast.operator, right: ast.expr) -> ast.BinOp:
    return ast.BinOp(left=left, op=op, right=right)


def fresh_name(prefix: str, taken: list[str] | dict[str, ConstDecl]) -> str:
    """``prefix1``, ``prefix2``, ... : the first not in ``taken``."""
    i = 1
    while f"{prefix}{i}" in taken:
        i += 1
    return f"{prefix}{i}"


def _local_reads(node: ast.AST) -> list[str]:
    return [n.id for n in _walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


def cleanup(parts: ModuleParts) -> None:
    """Drop assignments never read later (to a fixed point), then unreferenced constants."""
    for fn in parts.functions:
        changed = True
        while changed:
            changed = False
            for i, stmt in enumerate(fn.body):
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Name)):
                    continue
                later = [name for s in fn.body[i + 1:] for name in _local_reads(s)]
                if stmt.targets[0].id not in later:
                    del fn.body[i]
                    changed = True
                    break
    used: list[str] = []
    for fn in parts.functions:
        used += const_refs(fn)
    parts.constants = {k: v for k, v in parts.constants.items()
                       if k in used or k in RESERVED_CONSTANTS}


def inlined_values(fn: ast.FunctionDef) -> list[ast.expr]:
    """Each assignment/return value of ``fn`` with earlier locals substituted in.

    The result reads only ``f.``/``c.``, literals and calls, so a piece of it can be moved
    into another program without dragging local names along.
    """
    env: dict[str, ast.expr] = {}
    out: list[ast.expr] = []

    class _Sub(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if isinstance(node.ctx, ast.Load) and node.id in env:
                return copy.deepcopy(env[node.id])
            return node

    for stmt in fn.body:
        if isinstance(stmt, ast.Assign | ast.Return) and stmt.value is not None:
            value = _Sub().visit(copy.deepcopy(stmt.value))
            out.append(value)
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                env[stmt.targets[0].id] = value
    return out


def rename_consts(node: ast.AST, mapping: dict[str, str]) -> None:
    """Rename ``c.<old>`` to ``c.<new>`` in place."""
    for n in _walk(node):
        if is_param_attr(n, CONST_PARAM) and n.attr in mapping:
            n.attr = mapping[n.attr]


def short(node: ast.AST, limit: int = 48) -> str:
    """Source of ``node`` cut to ``limit`` characters, for one-line notes."""
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."
