"""Program expressions as Go source: a tiny Go expression tree and a gofmt-exact printer.

Why a printer of our own instead of piping through ``gofmt``: ``evolve export-go`` must
produce the same bytes whether or not a Go toolchain is installed, and the output must be
gofmt-clean (CI checks ``gofmt -l``). gofmt's only non-trivial layout decision inside an
expression is where to put blanks around binary operators; :func:`format_expr` reproduces
the algorithm of ``go/printer`` (``binaryExpr``/``cutoff``/``walkBinary``/``diffPrec``,
``ParenExpr`` reducing depth, calls with several arguments adding depth) for the node kinds
we emit. The tests compare it against ``gofmt`` on generated expressions.

Translation keeps the Python tree's shape exactly (left-associative, explicit parentheses
where Python grouped differently), so Go evaluates the same float64 operations in the same
order as numpy; only pure-literal sub-expressions are folded here in float64, because Go
would fold them at arbitrary precision and reject a constant division by zero.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from evolve.errors import ExportError

# ---------------------------------------------------------------------------------------
# Go expression tree


@dataclass(frozen=True)
class Atom:
    """An identifier, selector (``f.PfGemm``) or non-negative number literal."""

    text: str


@dataclass(frozen=True)
class Unary:
    op: str  # "-"
    x: GoExpr


@dataclass(frozen=True)
class Binary:
    op: str  # + - * / < <= > >=
    x: GoExpr
    y: GoExpr


@dataclass(frozen=True)
class Call:
    fn: str  # e.g. "math.Max"
    args: tuple[GoExpr, ...]


@dataclass(frozen=True)
class Paren:
    x: GoExpr


GoExpr = Atom | Unary | Binary | Call | Paren

_PREC = {"*": 5, "/": 5, "+": 4, "-": 4, "<": 3, "<=": 3, ">": 3, ">=": 3}
_UNARY_PREC = 6


def parenthesize(e: GoExpr) -> GoExpr:
    """Insert the parentheses Go needs to keep this tree's grouping (and no others)."""
    if isinstance(e, Binary):
        p = _PREC[e.op]
        x, y = parenthesize(e.x), parenthesize(e.y)
        if isinstance(x, Binary) and _PREC[x.op] < p:
            x = Paren(x)
        if isinstance(y, Binary) and _PREC[y.op] <= p:
            y = Paren(y)
        return Binary(e.op, x, y)
    if isinstance(e, Unary):
        x = parenthesize(e.x)
        return Unary(e.op, Paren(x) if isinstance(x, Binary) else x)
    if isinstance(e, Call):
        return Call(e.fn, tuple(parenthesize(a) for a in e.args))
    if isinstance(e, Paren):
        return Paren(parenthesize(e.x))
    return e


# ---------------------------------------------------------------------------------------
# gofmt's blank placement (go/printer/nodes.go), for the node kinds above


def _walk_binary(e: Binary) -> tuple[bool, bool, int]:
    p = _PREC[e.op]
    has4, has5, max_problem = p == 4, p == 5, 0
    if isinstance(e.x, Binary) and not _PREC[e.x.op] < p:
        h4, h5, mp = _walk_binary(e.x)
        has4, has5, max_problem = has4 or h4, has5 or h5, max(max_problem, mp)
    if isinstance(e.y, Binary):
        if not _PREC[e.y.op] <= p:
            h4, h5, mp = _walk_binary(e.y)
            has4, has5, max_problem = has4 or h4, has5 or h5, max(max_problem, mp)
    elif isinstance(e.y, Unary):
        pair = e.op + e.y.op
        if pair in ("/*", "&&", "&^"):
            max_problem = 5
        elif pair in ("++", "--"):
            max_problem = max(max_problem, 4)
    return has4, has5, max_problem


def _cutoff(e: Binary, depth: int) -> int:
    has4, has5, max_problem = _walk_binary(e)
    if max_problem > 0:
        return max_problem + 1
    if has4 and has5:
        return 5 if depth == 1 else 4
    return 6 if depth == 1 else 4


def _diff_prec(x: GoExpr, prec: int) -> int:
    return 0 if isinstance(x, Binary) and _PREC[x.op] == prec else 1


def _expr1(e: GoExpr, prec1: int, depth: int) -> str:
    if isinstance(e, Atom):
        return e.text
    if isinstance(e, Binary):
        depth = max(depth, 1)
        prec = _PREC[e.op]
        blank = prec < _cutoff(e, depth)
        left = _expr1(e.x, prec, depth + _diff_prec(e.x, prec))
        right = _expr1(e.y, prec + 1, depth + 1)
        sep = " " if blank else ""
        # go/printer separates tokens that would lex as one (`- -x`, `x/ *p`) anyway.
        glue = " " if not blank and (e.op + right[:1]) in ("--", "++", "/*") else ""
        return f"{left}{sep}{e.op}{sep}{glue}{right}"
    if isinstance(e, Unary):
        inner = _expr1(e.x, _UNARY_PREC, depth)
        return f"{e.op} {inner}" if inner.startswith(e.op) else f"{e.op}{inner}"
    if isinstance(e, Call):
        d = depth + 1 if len(e.args) > 1 else depth
        return f"{e.fn}({', '.join(_expr1(a, 0, d) for a in e.args)})"
    if isinstance(e, Paren):
        if isinstance(e.x, Paren):
            return _expr1(e.x, 0, depth)
        return f"({_expr1(e.x, 0, max(depth - 1, 1))})"
    raise TypeError(f"not a Go expression node: {e!r}")


def format_expr(e: GoExpr) -> str:
    """Go source of ``e`` as gofmt prints it at statement level (``x := <e>``, ``return``)."""
    return _expr1(parenthesize(e), 0, 1)


# ---------------------------------------------------------------------------------------
# Python program AST -> Go


def go_float(v: float) -> str:
    """A float64 literal Go parses to exactly ``v`` (Python's shortest round-trip repr)."""
    if not math.isfinite(v):
        raise ExportError(f"literal {v!r} is not finite")
    text = repr(float(abs(v)))
    return text if any(ch in text for ch in ".en") else text + ".0"


_MATH1 = {"sqrt": "math.Sqrt", "log": "math.Log", "log1p": "math.Log1p", "exp": "math.Exp",
          "abs": "math.Abs"}
_BINOPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_CMPOPS: dict[type, str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_FOLD: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: a / b}


def _literal(node: ast.expr) -> float | None:
    """The float64 value of a pure-literal sub-expression (+ - * / and unary minus)."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(cast(float, node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _literal(node.operand)
        return None if v is None else -v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _literal(node.left), _literal(node.right)
        if a is None or b is None:
            return None
        if type(node.op) is ast.Div and b == 0.0:
            raise ExportError(f"division by zero in `{ast.unparse(node)}`")
        return _FOLD[_BINOPS[type(node.op)]](a, b)
    return None


NEG_ZERO = "math.Copysign(0, -1)"  # Go folds the constant -0.0 to +0; 1/-0 must stay -Inf


def _number(v: float) -> GoExpr:
    if v == 0.0 and math.copysign(1.0, v) < 0:
        return Atom(NEG_ZERO)
    lit = Atom(go_float(v))
    return Unary("-", lit) if math.copysign(1.0, v) < 0 else lit


@dataclass
class Hoisted:
    """A ``where`` turned into a temporary: ``name`` = ``a`` if ``cond`` else ``b``."""

    name: str
    source: str  # the Python call, for the comment above it
    cond: GoExpr
    a: GoExpr
    b: GoExpr


class ExprTranslator:
    """Translates one function's expressions; ``where`` calls are hoisted to temporaries.

    ``attr`` maps ``(receiver, attribute)`` (``("f", "pf_gemm")``) to Go text; ``locals``
    maps Python local names to Go names; ``fresh`` hands out unused temporary names.
    """

    def __init__(self, attr: Callable[[str, str], str], locals_: dict[str, str],
                 fresh: Callable[[str], str]):
        self.attr, self.locals, self.fresh = attr, locals_, fresh
        self.hoisted: list[Hoisted] = []

    def expr(self, node: ast.expr) -> GoExpr:
        lit = _literal(node)
        if lit is not None:
            return _number(lit)
        if isinstance(node, ast.Name):
            if node.id not in self.locals:
                raise ExportError(f"unknown name {node.id!r}")
            return Atom(self.locals[node.id])
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return Atom(self.attr(node.value.id, node.attr))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return Unary("-", self.expr(node.operand))
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return self._call(node)
        raise ExportError(f"cannot translate `{ast.unparse(node)}` "
                          f"({type(node).__name__}) to Go")

    def _binop(self, node: ast.BinOp) -> GoExpr:
        x = self.expr(node.left)
        if isinstance(node.op, ast.Pow):
            exp = _literal(node.right)
            if exp == 2.0 and isinstance(x, Atom):
                return Binary("*", x, x)  # numpy squares exactly; so does x*x
            return Call("math.Pow", (x, self.expr(node.right)))
        if type(node.op) not in _BINOPS:
            raise ExportError(f"operator {type(node.op).__name__} is not in the language")
        y = self.expr(node.right)
        if type(node.op) is ast.Div and _literal(node.right) == 0.0:
            raise ExportError(f"division by zero in `{ast.unparse(node)}`")
        return Binary(_BINOPS[type(node.op)], x, y)

    def _call(self, node: ast.Call) -> GoExpr:
        name = node.func.id  # type: ignore[attr-defined]
        args = node.args
        if name in _MATH1 and len(args) == 1:
            return Call(_MATH1[name], (self.expr(args[0]),))
        if name in ("maximum", "minimum") and len(args) == 2:
            fn = "math.Max" if name == "maximum" else "math.Min"
            return Call(fn, (self.expr(args[0]), self.expr(args[1])))
        if name == "clip" and len(args) == 3:
            # numpy.clip(x, lo, hi) == minimum(maximum(x, lo), hi)
            inner = Call("math.Max", (self.expr(args[0]), self.expr(args[1])))
            return Call("math.Min", (inner, self.expr(args[2])))
        if name == "where" and len(args) == 3:
            cond = args[0]
            if not (isinstance(cond, ast.Compare) and len(cond.ops) == 1
                    and type(cond.ops[0]) in _CMPOPS):
                raise ExportError(f"where() needs one comparison: `{ast.unparse(cond)}`")
            go_cond = Binary(_CMPOPS[type(cond.ops[0])], self.expr(cond.left),
                             self.expr(cond.comparators[0]))
            a, b = self.expr(args[1]), self.expr(args[2])
            h = Hoisted(self.fresh("where"), ast.unparse(node), go_cond, a, b)
            self.hoisted.append(h)
            return Atom(h.name)
        raise ExportError(f"call `{ast.unparse(node)}` is not in the language")
