"""The program language as a context-free grammar, for constrained decoding of LLM replies.

Why: a small model asked for a program in prose answers with loops, ``open(...)``, invented
attributes and unbalanced parentheses; constrained to a grammar it can only emit text of the
language. The grammar is *generated* from the same whitelist the checker enforces
(:mod:`evolve.program.whitelist`: the calls and their arities, the operators, the comparison
operators, the queueing fields, the constant and statement limits) and from the glossary's
feature names, so the two cannot drift apart. Two renderings of one rule set:

* :func:`gbnf` – llama.cpp's GBNF (``grammar`` field of llama-cpp-python's server);
* :func:`lark` – Lark EBNF, the form vLLM's ``structured_outputs.grammar`` takes (and what
  the tests parse with the ``lark`` package).

What only the checker can decide (a context-free grammar cannot count or look up):
complexity, the ``where`` count, exponent ranges, constant bounds (``low <= init <= high``),
duplicate constant names, and whether a local or a ``c.<name>`` was declared before use.
The grammar is a superset of nothing: every text it accepts must still pass
:func:`evolve.program.language.parse_program`, which runs on every reply regardless.

Layout accepted: what people and ``ast.unparse`` write – comment and blank lines between
statements, newlines inside brackets, backslash continuations, 4-space indentation.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from evaluator.api import FEATURE_NAMES
from evolve.program.whitelist import CALL_ARITY, MAX_CONSTANTS, MAX_STATEMENTS, QUEUE_FIELDS

__all__ = ["FENCE_CLOSE", "FENCE_OPEN", "gbnf", "lark", "render", "rules"]

FENCE_OPEN = "```python\n"
FENCE_CLOSE = "```"
INDENT = "    "
COMPARISONS = ("<=", ">=", "<", ">")  # lang_check._CMPOPS, longest first
BINARY_SUM, BINARY_PRODUCT = ("+", "-"), ("*", "/")  # lang_check._BINOPS minus "**"


@dataclass(frozen=True)
class Lit:
    """A literal string."""

    text: str


@dataclass(frozen=True)
class Cls:
    """One character of a class, written as the body of ``[...]`` (``\\n``, ``\\\\`` escapes);
    the same body is valid in GBNF and in a Lark regex."""

    body: str


@dataclass(frozen=True)
class Ref:
    name: str


@dataclass(frozen=True)
class Seq:
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Alt:
    options: tuple[Item, ...]


@dataclass(frozen=True)
class Rep:
    """``item`` repeated ``lo`` to ``hi`` times (``hi`` None: unbounded)."""

    item: Item
    lo: int
    hi: int | None


Item = Lit | Cls | Ref | Seq | Alt | Rep


def _item(x: Item | str) -> Item:
    return Lit(x) if isinstance(x, str) else x


def seq(*items: Item | str | None) -> Item:
    """A sequence; ``None`` and empty literals (a layout's "no whitespace") are dropped."""
    parts = tuple(_item(i) for i in items if i is not None and i != "")
    return parts[0] if len(parts) == 1 else Seq(parts)


def alt(*options: Item | str) -> Item:
    return Alt(tuple(_item(o) for o in options))


def opt(*items: Item | str | None) -> Item:
    return Rep(seq(*items), 0, 1)


def star(*items: Item | str | None) -> Item:
    return Rep(seq(*items), 0, None)


@dataclass(frozen=True)
class Layout:
    """Where whitespace may go. ``None`` is "nothing here".

    * ``free`` – what people and ``ast.unparse`` write: comments and blank lines between
      statements, newlines inside brackets, backslash continuations (used to *check* text).
    * ``canonical`` – the one layout of :func:`evolve.program.language.parse_program`'s normalised
      source (``a + b``, ``f(x, y)``, ``(1.0, 0.0, 2.0)``), with either quote on constant
      names and an optional blank line between top-level parts. This is the grammar sent to
      servers: nearly unambiguous, so llama.cpp's sampler keeps few parse stacks (the free
      layout, where ``bws bws`` can split whitespace many ways, made llama-cpp-python's
      server die mid-request), and a small model never spends tokens on layout.
    """

    name: str
    op: Item | None  # around + - * / ** and comparisons
    comma_pre: Item | None
    comma_post: Item | None
    inner: Item | None  # just inside ( and )
    eol: Item  # end of a line
    gap: Item | None  # blank or comment lines between statements
    top_gap: Item | None  # between top-level parts


FREE = Layout("free", Ref("sp"), Ref("bws"), Ref("bws"), Ref("bws"), Ref("eol"), Ref("gap"),
              Ref("gap"))
CANONICAL = Layout("canonical", Lit(" "), None, Lit(" "), None, Lit("\n"), None,
                   Rep(Lit("\n"), 0, 1))
LAYOUTS = {"free": FREE, "canonical": CANONICAL}


def _expression_rules(tag: str, receiver: str, fields: tuple[str, ...], lay: Layout,
                      bracketed: bool) -> dict[str, Item]:
    """Expressions over ``receiver.<field>``. Python precedence: sum, product, unary
    minus, power (right operand a unary), atom. In the free layout, text inside brackets
    may span lines (``bracketed``), so it has its own family of rules."""
    e = f"{tag}_b" if bracketed else tag
    b = f"{tag}_b" if lay is FREE else tag  # the family used inside brackets
    w = lay.op if (lay is not FREE or not bracketed) else Ref("bws")
    arith = {
        f"expr_{e}": seq(Ref(f"term_{e}"), star(w, alt(*BINARY_SUM), w, Ref(f"term_{e}"))),
        f"term_{e}": seq(Ref(f"unary_{e}"),
                         star(w, alt(*BINARY_PRODUCT), w, Ref(f"unary_{e}"))),
        f"unary_{e}": alt(seq("-", None if lay is CANONICAL else w, Ref(f"unary_{e}")),
                          Ref(f"power_{e}")),
        f"power_{e}": seq(Ref(f"atom_{e}"), opt(w, "**", w, Ref(f"unary_{e}"))),
        f"atom_{e}": alt(Ref("number"), Ref(f"field_{tag}"), seq("c.", Ref("ident")),
                         Ref("ident"), Ref(f"call_{tag}"),
                         seq("(", lay.inner, Ref(f"expr_{b}"), lay.inner, ")")),
    }
    if bracketed:
        return arith
    arg = Ref(f"expr_{b}")
    sep = seq(lay.comma_pre, ",", lay.comma_post)
    calls: list[Item] = []
    for name, arity in CALL_ARITY.items():
        cmp_ws = lay.op if lay is CANONICAL else Ref("bws")
        first: Item = (seq(arg, cmp_ws, alt(*COMPARISONS), cmp_ws, arg)
                       if name == "where" else arg)
        calls.append(seq(f"{name}(", lay.inner, first,
                         *[seq(sep, arg) for _ in range(arity - 1)], lay.inner, ")"))
    return {**arith,
            f"field_{tag}": seq(f"{receiver}.", alt(*sorted(fields, key=lambda s: (-len(s), s)))),
            f"call_{tag}": alt(*calls)}


def _function(tag: str, name: str, receiver: str, lay: Layout) -> Item:
    """``def name(receiver, c):`` with an optional docstring, assignments, one return."""
    sp = Ref("sp") if lay is FREE else None
    eq = lay.op
    assign = seq(INDENT, Ref("ident"), eq, "=", eq, Ref(f"expr_{tag}"), lay.eol, lay.gap)
    return seq("def ", name, "(", sp, receiver, lay.comma_pre, ",", lay.comma_post, "c", sp,
               ")", sp, ":", lay.eol, lay.gap,
               opt(INDENT, Ref("docstring"), lay.eol, lay.gap),
               Rep(assign, 0, MAX_STATEMENTS - 1),
               INDENT, "return ", sp, Ref(f"expr_{tag}"), lay.eol)


@lru_cache(maxsize=2)
def rules(layout: str = "canonical") -> dict[str, Item]:
    """The rule set, ``root`` first: a fenced program (``program`` is the bare module)."""
    lay = LAYOUTS[layout]
    digits = Rep(Cls("0-9"), 1, None)
    number = seq(alt(seq(digits, opt(".", Rep(Cls("0-9"), 0, None))), seq(".", digits)),
                 opt(Cls("eE"), opt(Cls("+-")), digits))
    signed = seq(opt("-"), Ref("number"))
    comma = seq(lay.comma_pre, ",", lay.comma_post)
    inner = lay.inner
    triple = seq(signed, comma, signed, comma, signed, lay.comma_pre,
                 opt(",", lay.comma_pre) if lay is FREE else None)
    entry = seq(alt(seq('"', Ref("ident"), '"'), seq("'", Ref("ident"), "'")),
                Ref("sp") if lay is FREE else None, ":", lay.comma_post,
                alt(seq("(", inner, triple, inner, ")"), seq("[", inner, triple, inner, "]")))
    entries = seq(entry, Rep(seq(comma, entry), 0, MAX_CONSTANTS - 1),
                  opt(lay.comma_pre, ",") if lay is FREE else None)
    eq = Ref("sp") if lay is FREE else Lit(" ")
    out: dict[str, Item] = {
        "root": seq(FENCE_OPEN, Ref("program"), FENCE_CLOSE),
        "program": seq(lay.gap, opt(Ref("docstring"), lay.eol, lay.top_gap),
                       "CONSTANTS", eq, "=", eq, "{", inner, opt(entries), inner,
                       "}", lay.eol, lay.top_gap, _function("step", "step_time", "f", lay),
                       lay.top_gap,
                       opt(_function("queue", "queueing_time", "r", lay), lay.top_gap)),
        "docstring": alt(seq('"""', Rep(Ref("docchar"), 0, None), '"""'),
                         seq("'''", Rep(Ref("docchar1"), 0, None), "'''")),
        "docchar": alt(Cls('^"\\\\'), seq("\\", Cls("^\\n"))),
        "docchar1": alt(Cls("^'\\\\"), seq("\\", Cls("^\\n"))),
        "number": number,
        "ident": seq(Cls("a-zA-Z"), Rep(Cls("a-zA-Z0-9_"), 0, None)),
    }
    if lay is FREE:
        out.update({
            # inline whitespace (a backslash continues the line); whitespace in brackets
            "sp": Rep(alt(Cls(" \\t"), "\\\n"), 0, None),
            "bws": Rep(alt(Cls(" \\t\\n"), Ref("comment")), 0, None),
            "comment": seq("#", Rep(Cls("^\\n"), 0, None), "\n"),
            "eol": seq(Ref("sp"), alt("\n", Ref("comment"))),
            # blank and comment-only lines between statements
            "gap": Rep(seq(Rep(Cls(" \\t"), 0, None), alt("\n", Ref("comment"))), 0, None),
        })
    for tag, receiver, fields in (("step", "f", tuple(FEATURE_NAMES)),
                                  ("queue", "r", QUEUE_FIELDS)):
        out.update(_expression_rules(tag, receiver, fields, lay, bracketed=False))
        if lay is FREE:
            out.update(_expression_rules(tag, receiver, fields, lay, bracketed=True))
    return out


# -- rendering ---------------------------------------------------------------------------

_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}


def _quote(text: str) -> str:
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in text) + '"'


def _suffix(inner: str, lo: int, hi: int | None, fmt: str) -> str:
    if (lo, hi) == (0, 1):
        return inner + "?"
    if (lo, hi) == (0, None):
        return inner + "*"
    if (lo, hi) == (1, None):
        return inner + "+"
    if fmt == "gbnf":
        return f"{inner}{{{lo},{'' if hi is None else hi}}}"
    if hi is None:
        return f"({inner} ~ {lo} {inner}*)"
    return f"({inner} ~ {lo}..{hi})" if lo != hi else f"({inner} ~ {lo})"


def _render_gbnf(item: Item, top: bool = False) -> str:
    """GBNF, nested groups inline (llama.cpp compiles them into its own helper rules)."""
    if isinstance(item, Lit):
        return _quote(item.text)
    if isinstance(item, Cls):
        return f"[{item.body}]"
    if isinstance(item, Ref):
        return _name(item.name, "gbnf")
    if isinstance(item, Seq):
        text = " ".join(_render_gbnf(i) for i in item.items)
        return text if top else f"({text})"
    if isinstance(item, Alt):
        text = " | ".join(_render_gbnf(o, top=True) for o in item.options)
        return text if top else f"({text})"
    return _suffix(_render_gbnf(item.item), item.lo, item.hi, "gbnf")


class _LarkRules:
    """Lark rendering with every nested group hoisted into a rule of its own (``_gN``).

    Why: Lark turns each ``x?`` (and ``x ~ a..b``) of a rule into alternatives *of that
    rule*, so a long rule with many optional groups inline grows exponentially (building
    the parser of the inline form did not finish in minutes). Hoisted, every rule stays
    small; rules named with a leading ``_`` are inlined in Lark's tree, so the parse is the
    same. Identical groups share one rule.
    """

    def __init__(self) -> None:
        self.extra: dict[str, str] = {}  # rendered body -> rule name

    def render(self, item: Item, top: bool = False) -> str:
        if isinstance(item, Lit):
            return _quote(item.text)
        if isinstance(item, Cls):
            return f"/[{item.body}]/"
        if isinstance(item, Ref):
            return _name(item.name, "lark")
        if isinstance(item, (Seq, Alt)) and not top:
            return self._hoist(item)
        if isinstance(item, Seq):
            return " ".join(self.render(i) for i in item.items)
        if isinstance(item, Alt):
            return " | ".join(self.render(o, top=True) for o in item.options)
        inner = self.render(item.item)
        if isinstance(item.item, Rep):
            inner = self._hoist(item.item)
        return _suffix(inner, item.lo, item.hi, "lark")

    def _hoist(self, item: Item) -> str:
        body = self.render(item, top=True)
        if body not in self.extra:
            self.extra[body] = f"_g{len(self.extra)}"
        return self.extra[body]


def _name(name: str, fmt: str) -> str:
    if fmt == "gbnf":
        return name.replace("_", "-")
    return "start" if name == "root" else name


def render(table: dict[str, Item], fmt: str, start: str = "root") -> str:
    """Render a rule table (``root`` first) as ``"gbnf"`` or ``"lark"``; ``start`` is the
    rule that becomes the grammar's root (``root``/``start``)."""
    order = [start] + [n for n in table if n not in (start, "root")]
    head = [_name("root" if n == start else n, fmt) for n in order]
    if fmt == "gbnf":
        return "".join(f"{h} ::= {_render_gbnf(table[n], True)}\n"
                       for h, n in zip(head, order, strict=True))
    lark_rules = _LarkRules()
    lines = [f"{h}: {lark_rules.render(table[n], True)}" for h, n in zip(head, order, strict=True)]
    lines += [f"{name}: {body}" for body, name in lark_rules.extra.items()]
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=8)
def gbnf(fenced: bool = True, layout: str = "canonical") -> str:
    """llama.cpp GBNF; ``root`` is the fenced program (or, ``fenced=False``, the module)."""
    return render(rules(layout), "gbnf", "root" if fenced else "program")


@lru_cache(maxsize=8)
def lark(fenced: bool = True, layout: str = "canonical") -> str:
    """Lark EBNF (start rule ``start``), the form of vLLM's ``structured_outputs.grammar``."""
    return render(rules(layout), "lark", "root" if fenced else "program")
