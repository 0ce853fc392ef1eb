"""The whitelist checker of the program language, run on the AST before anything executes.

Why a separate module: :mod:`evolve.program.language` is the public surface (``parse_program``,
``Program``); this module is the security boundary and is kept small enough to audit in
one sitting. It never compiles, imports or evaluates user text: it only walks the tree
``ast.parse`` produced and either returns a :class:`Checked` summary or raises
:class:`ProgramError` naming the rule, the line and the offending node.

Rules (the ``rule`` of a :class:`ProgramError`): ``encoding``, ``syntax``, ``size``,
``module``, ``constants``, ``signature``, ``statement``, ``import``, ``loop``, ``global``,
``name``, ``attribute``, ``feature``, ``constant``, ``call``, ``compare``, ``operator``,
``power``, ``literal``, ``subscript``, ``lambda``, ``comprehension``, ``walrus``,
``expression``, ``complexity``, ``where`` (and ``numeric`` / ``compile`` raised later).
"""

from __future__ import annotations

import ast
import keyword
import math
from dataclasses import dataclass, field
from typing import cast

from evaluator.api import FEATURE_NAMES, REQUEST_FIELD_NAMES
from evolve.errors import ProgramError

MAX_SOURCE_CHARS = 20_000
MAX_DEPTH = 60  # nesting of AST nodes; deeper trees are rejected before recursive walks
MAX_STATEMENTS = 40  # per function
MAX_CONSTANTS = 10
# Declared values the fitting box can map: |v| <= BOUND_MAX and, unless 0, >= BOUND_MIN.
# Beyond them the box's width (or its log ratio) overflows and every point of the box maps
# to one end (found in review: (5, -1e308, 1e308) was accepted and could not be fitted).
BOUND_MAX, BOUND_MIN = 1e100, 1e-100
MAX_COMPLEXITY = 30
MAX_WHERE = 3
POW_RANGE = (-4.0, 4.0)
SPECIAL_CONSTANTS = ("post_decode_us", "output_token_us")
QUEUE_FIELDS = REQUEST_FIELD_NAMES  # what queueing_time reads of r: the request, its server
CALL_ARITY: dict[str, int] = {"maximum": 2, "minimum": 2, "where": 3, "clip": 3, "sqrt": 1,
                              "log": 1, "log1p": 1, "exp": 1, "abs": 1}
_FEATURES = frozenset(FEATURE_NAMES)
_RESERVED = frozenset({"f", "c", "r", "CONSTANTS", "step_time", "queueing_time", *CALL_ARITY})
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_CMPOPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_NODE_RULES: dict[type, str] = {
    ast.Import: "import", ast.ImportFrom: "import", ast.For: "loop", ast.AsyncFor: "loop",
    ast.While: "loop", ast.Global: "global", ast.Nonlocal: "global",
    ast.Subscript: "subscript", ast.Slice: "subscript", ast.Lambda: "lambda",
    ast.ListComp: "comprehension", ast.SetComp: "comprehension",
    ast.DictComp: "comprehension", ast.GeneratorExp: "comprehension",
    ast.NamedExpr: "walrus", ast.JoinedStr: "literal", ast.FormattedValue: "literal",
    ast.BoolOp: "operator",
}


def _text(node: ast.AST | None) -> str:
    if node is None:
        return ""
    try:
        s = ast.unparse(node)
    except Exception:  # pragma: no cover - unparse of a checked-depth tree does not fail
        s = type(node).__name__
    s = " ".join(s.split())
    return s if len(s) <= 80 else s[:77] + "..."


def fail(reason: str, rule: str, node: ast.AST | None = None) -> ProgramError:
    """Build (not raise) an error located at ``node``."""
    return ProgramError(reason, rule, getattr(node, "lineno", None), _text(node))


@dataclass(frozen=True)
class ConstSpec:
    """One declared constant: initial value and the box CMA-ES searches in."""

    name: str
    init: float
    low: float
    high: float


@dataclass
class FunctionInfo:
    """A checked ``step_time`` or ``queueing_time``: its statements, minus any docstring."""

    node: ast.FunctionDef
    body: list[ast.stmt]


@dataclass
class Checked:
    """What the checker learned about a valid program (input of the normaliser)."""

    doc: str
    constants: dict[str, ConstSpec]
    step: FunctionInfo
    queue: FunctionInfo | None
    complexity: int = 0
    n_where: int = 0
    features: set[str] = field(default_factory=set)
    used_constants: set[str] = field(default_factory=set)


def _depth_ok(tree: ast.AST) -> None:
    """Iterative depth check, so the recursive walks below cannot hit RecursionError."""
    stack = [(tree, 0)]
    while stack:
        node, d = stack.pop()
        if d > MAX_DEPTH:
            raise fail(f"expression nested deeper than {MAX_DEPTH} levels", "size", node)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))


def _number(node: ast.expr, what: str) -> float:
    """A numeric literal, optionally negated (``-3.0``); finite; no bools."""
    sign = 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        sign, node = -1.0, node.operand
    if not (isinstance(node, ast.Constant) and type(node.value) in (int, float)):
        raise fail(f"{what} must be a numeric literal", "constants", node)
    value = sign * float(cast(float, node.value))
    if not math.isfinite(value):
        raise fail(f"{what} is not finite", "constants", node)
    return value


def check_constants(node: ast.Assign) -> dict[str, ConstSpec]:
    """``CONSTANTS = {"name": (init, low, high), ...}`` with literal numbers only."""
    if not isinstance(node.value, ast.Dict):
        raise fail("CONSTANTS must be a dict literal {name: (init, low, high)}", "constants",
                   node.value)
    out: dict[str, ConstSpec] = {}
    for key, val in zip(node.value.keys, node.value.values, strict=True):
        if key is None:
            raise fail("no ** unpacking in CONSTANTS", "constants", val)
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise fail("constant names must be string literals", "constants", key)
        name = key.value
        if (not name.isidentifier() or not name.isascii() or keyword.iskeyword(name)
                or name.startswith("_")):
            raise fail(f"constant name {name!r} must be an ASCII identifier not starting "
                       "with _", "constants", key)
        if name in out:
            raise fail(f"constant {name!r} declared twice", "constants", key)
        if not isinstance(val, (ast.Tuple, ast.List)) or len(val.elts) != 3:
            raise fail(f"constant {name!r} must be (init, low, high)", "constants", val)
        init, low, high = (_number(e, f"constant {name!r}") for e in val.elts)
        for v in (init, low, high):
            if abs(v) > BOUND_MAX or 0.0 < abs(v) < BOUND_MIN:
                raise fail(f"constant {name!r}: {v!r} outside the range a fit can map "
                           f"(0 or {BOUND_MIN:g} <= |v| <= {BOUND_MAX:g})", "constants", val)
        if not low < high:
            raise fail(f"constant {name!r}: low {low!r} must be < high {high!r}", "constants",
                       val)
        if not low <= init <= high:
            raise fail(f"constant {name!r}: init {init!r} outside [{low!r}, {high!r}]",
                       "constants", val)
        out[name] = ConstSpec(name, init, low, high)
    if len(out) > MAX_CONSTANTS:
        raise fail(f"{len(out)} constants declared; at most {MAX_CONSTANTS}", "constants",
                   node)
    return out


def _statement_rule(node: ast.stmt) -> str:
    return _NODE_RULES.get(type(node), "statement")


class _FunctionChecker:
    """Checks one function body; accumulates complexity, features and constants used."""

    def __init__(self, kind: str, consts: dict[str, ConstSpec], out: Checked):
        self.kind = kind  # "step" or "queue"
        self.receiver = "f" if kind == "step" else "r"
        self.consts, self.out = consts, out
        self.locals: set[str] = set()

    def check(self, fn: ast.FunctionDef, params: tuple[str, str]) -> FunctionInfo:
        a = fn.args
        names = tuple(x.arg for x in a.args)
        if (names != params or a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg
                or a.defaults or a.kw_defaults or any(x.annotation for x in a.args)
                or fn.returns or getattr(fn, "type_params", None)):
            raise fail(f"must be exactly `def {fn.name}({', '.join(params)}):` with no "
                       "defaults or annotations", "signature", fn)
        if fn.decorator_list:
            raise fail("decorators are not allowed", "signature", fn.decorator_list[0])
        body = list(fn.body)
        if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            body = body[1:]  # a function docstring is allowed and dropped by normalisation
        if len(body) > MAX_STATEMENTS:
            raise fail(f"more than {MAX_STATEMENTS} statements", "size", fn)
        for i, stmt in enumerate(body):
            last = i == len(body) - 1
            if isinstance(stmt, ast.Assign):
                if last:
                    raise fail("the last statement must be `return <expression>`",
                               "statement", stmt)
                self._assign(stmt)
            elif isinstance(stmt, ast.Return):
                if not last:
                    raise fail("`return` must be the last statement", "statement", stmt)
                if stmt.value is None:
                    raise fail("`return` needs an expression", "statement", stmt)
                self.expr(stmt.value)
            else:
                rule = _statement_rule(stmt)
                raise fail(f"{type(stmt).__name__} statement not allowed; only assignments "
                           "to local names and a final return", rule, stmt)
        if not body:
            raise fail("empty function: needs `return <expression>`", "statement", fn)
        return FunctionInfo(fn, body)

    def _assign(self, stmt: ast.Assign) -> None:
        if len(stmt.targets) != 1 or not isinstance(stmt.targets[0], ast.Name):
            tgt = stmt.targets[0]
            raise fail("assign to exactly one plain local name", _NODE_RULES.get(
                type(tgt), "name") if len(stmt.targets) == 1 else "name", tgt)
        self.expr(stmt.value)  # the value may not refer to the name being defined
        name = stmt.targets[0].id
        if name.startswith("_") or name in _RESERVED:
            raise fail(f"local name {name!r} is reserved (or starts with _)", "name",
                       stmt.targets[0])
        if not name.isascii():  # the Go export (and BLIS) take ASCII identifiers only
            raise fail(f"local name {name!r} must be ASCII", "name", stmt.targets[0])
        self.locals.add(name)

    def expr(self, node: ast.expr, where_cond: bool = False) -> None:
        out = self.out
        if isinstance(node, ast.Constant):
            if type(node.value) not in (int, float):
                raise fail(f"{type(node.value).__name__} literal not allowed", "literal", node)
            if not math.isfinite(float(cast(float, node.value))):
                raise fail("literal is not finite", "literal", node)
        elif isinstance(node, ast.Name):
            if node.id not in self.locals:
                raise fail(f"name {node.id!r} is not a local assigned earlier (use "
                           f"{self.receiver}.<name> / c.<name>)", "name", node)
        elif isinstance(node, ast.Attribute):
            self._attribute(node)
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINOPS:
                raise fail(f"operator {type(node.op).__name__} not allowed (+ - * / ** only)",
                           "operator", node)
            out.complexity += 1
            self.expr(node.left)
            self.expr(node.right)
            if isinstance(node.op, ast.Pow):
                self._exponent(node.right)
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.USub):
                raise fail(f"unary {type(node.op).__name__} not allowed (only -x)", "operator",
                           node)
            out.complexity += 1
            self.expr(node.operand)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Compare):
            if not where_cond:
                raise fail("comparisons are allowed only as the first argument of where()",
                           "compare", node)
            if len(node.ops) != 1 or not isinstance(node.ops[0], _CMPOPS):
                raise fail("one comparison with < <= > >= only", "compare", node)
            out.complexity += 1
            self.expr(node.left)
            self.expr(node.comparators[0])
        else:
            rule = _NODE_RULES.get(type(node), "expression")
            raise fail(f"{type(node).__name__} expressions are not allowed", rule, node)

    def _attribute(self, node: ast.Attribute) -> None:
        base, attr = node.value, node.attr
        allowed = (self.receiver, "c")
        if not isinstance(base, ast.Name) or base.id not in allowed or attr.startswith("_"):
            raise fail(f"only {self.receiver}.<name> and c.<name> attributes are allowed",
                       "attribute", node)
        if base.id == "c":
            if attr not in self.consts:
                raise fail(f"constant {attr!r} is not declared in CONSTANTS", "constant", node)
            self.out.used_constants.add(attr)
        elif self.kind == "step":
            if attr not in _FEATURES:
                raise fail(f"unknown feature {attr!r}", "feature", node)
            self.out.features.add(attr)
        elif attr not in QUEUE_FIELDS:
            raise fail(f"queueing_time may read only r.{' / r.'.join(QUEUE_FIELDS)}",
                       "feature", node)

    def _call(self, node: ast.Call) -> None:
        fn = node.func
        if not isinstance(fn, ast.Name) or fn.id not in CALL_ARITY:
            raise fail(f"call to a function outside {sorted(CALL_ARITY)}", "call", node)
        if node.keywords:
            raise fail("keyword arguments are not allowed", "call", node)
        if any(isinstance(a, ast.Starred) for a in node.args):
            raise fail("starred arguments are not allowed", "call", node)
        if len(node.args) != CALL_ARITY[fn.id]:
            raise fail(f"{fn.id}() takes {CALL_ARITY[fn.id]} arguments, got {len(node.args)}",
                       "call", node)
        self.out.complexity += 1
        if fn.id == "where":
            self.out.n_where += 1
            if not isinstance(node.args[0], ast.Compare):
                raise fail("where()'s first argument must be a comparison", "compare",
                           node.args[0])
            self.expr(node.args[0], where_cond=True)
            self.expr(node.args[1])
            self.expr(node.args[2])
        else:
            for a in node.args:
                self.expr(a)

    def _exponent(self, node: ast.expr) -> None:
        lo, hi = self._interval(node)
        if not (POW_RANGE[0] <= lo and hi <= POW_RANGE[1]):
            raise fail(f"exponent range [{lo:g}, {hi:g}] exceeds [{POW_RANGE[0]:g}, "
                       f"{POW_RANGE[1]:g}]", "power", node)

    def _interval(self, node: ast.expr) -> tuple[float, float]:
        """Range of a constant exponent over the declared bounds (interval arithmetic)."""
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            v = float(cast(float, node.value))
            if math.isfinite(v):
                return v, v
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            lo, hi = self._interval(node.operand)
            return -hi, -lo
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "c" and node.attr in self.consts):
            spec = self.consts[node.attr]
            return spec.low, spec.high
        elif isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult,
                                                                 ast.Div):
            a, b = self._interval(node.left), self._interval(node.right)
            if isinstance(node.op, ast.Add):
                return a[0] + b[0], a[1] + b[1]
            if isinstance(node.op, ast.Sub):
                return a[0] - b[1], a[1] - b[0]
            if isinstance(node.op, ast.Div):
                if b[0] <= 0.0 <= b[1]:
                    raise fail("exponent may divide by zero over the constants' bounds",
                               "power", node)
                b = (1.0 / b[1], 1.0 / b[0])
            p = [x * y for x in a for y in b]
            return min(p), max(p)
        raise fail("exponent must be a numeric literal or an expression of literals and "
                   "c.<name> (+ - * /) whose range lies within [-4, 4]", "power", node)


def check_tree(tree: ast.Module) -> Checked:
    """Validate a parsed module against the whole whitelist; see the module docstring."""
    _depth_ok(tree)
    body = list(tree.body)
    doc = ""
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        doc = body[0].value.value
        body = body[1:]
    const_node: ast.Assign | None = None
    fns: dict[str, ast.FunctionDef] = {}
    for stmt in body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == "CONSTANTS"):
            if const_node is not None:
                raise fail("CONSTANTS assigned twice", "module", stmt)
            const_node = stmt
        elif isinstance(stmt, ast.FunctionDef) and stmt.name in ("step_time", "queueing_time"):
            if stmt.name in fns:
                raise fail(f"{stmt.name} defined twice", "module", stmt)
            fns[stmt.name] = stmt
        elif isinstance(stmt, ast.AsyncFunctionDef):
            raise fail("async functions are not allowed", "signature", stmt)
        else:
            rule = _statement_rule(stmt)
            rule = "module" if rule == "statement" else rule
            raise fail(f"{type(stmt).__name__} not allowed at module level (only a docstring,"
                       " CONSTANTS, def step_time, def queueing_time)", rule, stmt)
    if const_node is None:
        raise fail("missing `CONSTANTS = {name: (init, low, high)}`", "constants", tree)
    if "step_time" not in fns:
        raise fail("missing `def step_time(f, c):`", "module", tree)
    consts = check_constants(const_node)
    out = Checked(doc=doc, constants=consts, step=None, queue=None)  # type: ignore[arg-type]
    out.step = _FunctionChecker("step", consts, out).check(fns["step_time"], ("f", "c"))
    if "queueing_time" in fns:
        out.queue = _FunctionChecker("queue", consts, out).check(fns["queueing_time"],
                                                                 ("r", "c"))
    if out.n_where > MAX_WHERE:
        raise fail(f"{out.n_where} where() calls; at most {MAX_WHERE}", "where",
                   fns["step_time"])
    if out.complexity > MAX_COMPLEXITY:
        raise fail(f"complexity {out.complexity} (operators + calls + comparisons) exceeds "
                   f"{MAX_COMPLEXITY}", "complexity", fns["step_time"])
    return out
