"""The *decoding* grammar: a strict sub-language of the program language for small models.

Why a second rule set: the full grammar (:mod:`evolve.program.grammar`) accepts every program of the
language, including many the checker then rejects for reasons a context-free grammar can
express only with help. Measured with SmolLM2-135M under the full grammar, most replies
were well-formed but invalid: constants whose init lies outside their own bounds
(``(3000.0, 0.1, 2.0)``), locals and constants used but never declared, keywords as names.
This grammar closes those holes *by construction*, so what the model can emit passes the
checker's context rules:

* constants are named ``k0 .. k{n-1}`` in order, and the body of a program with n constants
  may read only ``c.k0 .. c.k{n-1}`` (one family of expression rules per n);
* every constant is ``(init, 0.0, 10^d)`` with ``init`` written with at most d integer
  digits, so ``0 <= init < high`` always holds (d = 0 gives ``(0.xxx, 0.0, 1.0)``);
* the body is one ``return`` (no locals to forget to declare); exponents are literals in
  [-4, 4]; the docstring is one line of at most :data:`DOC_CHARS` characters;
* expressions nest at most :data:`MAX_DEPTH` calls/parentheses deep, with at most
  :data:`MAX_TERMS` terms per sum and :data:`MAX_FACTORS` factors per product (unbounded,
  the 135M model nested ``maximum(`` until ``max_tokens`` ran out in 3 of 10 replies).

The *term* form (:func:`term_rules`) is the body language alone: ``def term(f, c)`` with one
``return`` reading at most :data:`TERM_CONSTANTS` constants ``c.k0 .. c.k2`` and no
docstring or ``CONSTANTS`` line (the splice declares them): one expression that
:mod:`evolve.operators.llm.term` adds to the parent's step time. Why so bare: in the
recorded replies of the first term grammar the docstring was 17 % of the tokens and the
``CONSTANTS`` line 36 %, 87 % of its bounds the prompt's example copied (``10.0``).

What it still cannot promise: complexity and the ``where`` count (the checker enforces
them) and the physics checks at fitting time. Every text it accepts is also accepted by the
canonical grammar, and the checker runs on every reply regardless.
"""

from __future__ import annotations

from functools import lru_cache

from evaluator.api import FEATURE_NAMES
from evolve.program.grammar import (
    BINARY_PRODUCT,
    BINARY_SUM,
    COMPARISONS,
    FENCE_CLOSE,
    FENCE_OPEN,
    Cls,
    Item,
    Lit,
    Ref,
    Rep,
    alt,
    opt,
    render,
    seq,
)
from evolve.program.whitelist import CALL_ARITY, MAX_CONSTANTS

DOC_CHARS = 120
MAX_DIGITS = 6  # largest upper bound 10^6
MAX_DEPTH = 2  # nesting of calls and parentheses
MAX_TERMS, MAX_FACTORS = 4, 3  # per sum, per product
TERM_CONSTANTS = 3  # constants of one term (the term form)


def _expressions(n: int, depth: int) -> dict[str, Item]:
    """Expressions of a program with ``n`` constants (``c.k0 .. c.k{n-1}``) at nesting
    ``depth``: calls and parentheses open the next depth, and at :data:`MAX_DEPTH` only
    numbers, features and constants remain – so a reply cannot nest without end."""
    e = f"n{n}d{depth}"
    w = Lit(" ")
    const = seq("c.k", Cls(f"0-{n - 1}"))
    atoms: list[Item] = [Ref("number"), Ref("feature"), const]
    if depth < MAX_DEPTH:
        arg = Ref(f"expr_n{n}d{depth + 1}")
        for name, arity in CALL_ARITY.items():
            first: Item = (seq(arg, w, alt(*COMPARISONS), w, arg) if name == "where"
                           else arg)
            atoms.append(seq(f"{name}(", first,
                             *[seq(", ", arg) for _ in range(arity - 1)], ")"))
        atoms.append(seq("(", arg, ")"))
    return {
        f"expr_{e}": seq(Ref(f"term_{e}"),
                         Rep(seq(w, alt(*BINARY_SUM), w, Ref(f"term_{e}")), 0, MAX_TERMS - 1)),
        f"term_{e}": seq(Ref(f"unary_{e}"), Rep(seq(w, alt(*BINARY_PRODUCT), w,
                                                   Ref(f"unary_{e}")), 0, MAX_FACTORS - 1)),
        f"unary_{e}": alt(seq("-", Ref(f"power_{e}")), Ref(f"power_{e}")),
        f"power_{e}": seq(Ref(f"atom_{e}"), opt(" ** ", Ref("exponent"))),
        f"atom_{e}": alt(*atoms),
    }


def _constants(n: int) -> Item:
    entries = [seq(", " if i else None, f'"k{i}": ', Ref("triple")) for i in range(n)]
    return seq("CONSTANTS = {", *entries, "}\n")


@lru_cache(maxsize=1)
def strict_rules() -> dict[str, Item]:
    """The rule set, ``root`` first (a fenced program; ``program`` is the bare module)."""
    return _rules("step_time", MAX_CONSTANTS)


@lru_cache(maxsize=TERM_CONSTANTS)
def term_rules(n: int = TERM_CONSTANTS) -> dict[str, Item]:
    """The *term* form's rule set: ``def term(f, c)`` returning one expression over at most
    ``n`` (1 to :data:`TERM_CONSTANTS`) constants, nothing else – what a small model adds to
    its parent (:mod:`evolve.operators.llm.term` declares the constants and splices it in;
    ``n`` below the maximum: a parent with that little room left under MAX_CONSTANTS)."""
    if not 1 <= n <= TERM_CONSTANTS:
        raise ValueError(f"a term has 1 to {TERM_CONSTANTS} constants, not {n}")
    out: dict[str, Item] = {
        "root": seq(FENCE_OPEN, Ref("program"), FENCE_CLOSE),
        "program": seq("def term(f, c):\n    return ", Ref(f"expr_n{n}d0"), "\n"),
        **_leaves(),
    }
    for depth in range(MAX_DEPTH + 1):
        out.update(_expressions(n, depth))
    return out


def _leaves() -> dict[str, Item]:
    """Numbers, exponents and features: the rules every expression family ends in."""
    digit = Cls("0-9")
    return {
        "number": seq(Rep(digit, 1, 6), opt(seq(".", Rep(digit, 1, 3)))),
        "exponent": seq(opt("-"), alt(seq(Cls("0-3"), opt(".", digit)), seq("4", opt(".0")))),
        "feature": seq("f.", alt(*sorted(FEATURE_NAMES, key=lambda s: (-len(s), s)))),
    }


def _rules(fn: str, max_constants: int) -> dict[str, Item]:
    digit = Cls("0-9")
    frac = seq(".", Rep(digit, 1, 3))
    triples = [seq("(", "0", frac, ", 0.0, 1.0)")]
    for d in range(1, MAX_DIGITS + 1):
        triples.append(seq("(", Rep(digit, 1, d), frac, ", 0.0, 1", "0" * d, ".0)"))
    programs = [seq(_constants(n), "\n", f"def {fn}(f, c):\n    return ",
                    Ref(f"expr_n{n}d0"), "\n") for n in range(1, max_constants + 1)]
    out: dict[str, Item] = {
        "root": seq(FENCE_OPEN, Ref("program"), FENCE_CLOSE),
        "program": seq(Ref("docline"), alt(*programs)),
        "docline": seq('"""', Rep(Cls('^"\\\\\\n'), 1, DOC_CHARS), '"""\n'),
        "triple": alt(*triples),
        **_leaves(),
    }
    for n in range(1, max_constants + 1):
        for depth in range(MAX_DEPTH + 1):
            out.update(_expressions(n, depth))
    return out


@lru_cache(maxsize=2)
def strict_gbnf(fenced: bool = True) -> str:
    """The strict grammar in llama.cpp's GBNF."""
    return render(strict_rules(), "gbnf", "root" if fenced else "program")


@lru_cache(maxsize=2)
def strict_lark(fenced: bool = True) -> str:
    """The strict grammar in Lark EBNF (vLLM's ``structured_outputs.grammar``)."""
    return render(strict_rules(), "lark", "root" if fenced else "program")


@lru_cache(maxsize=2 * TERM_CONSTANTS)
def term_gbnf(fenced: bool = True, constants: int = TERM_CONSTANTS) -> str:
    """The term form's grammar in llama.cpp's GBNF."""
    return render(term_rules(constants), "gbnf", "root" if fenced else "program")


@lru_cache(maxsize=2 * TERM_CONSTANTS)
def term_lark(fenced: bool = True, constants: int = TERM_CONSTANTS) -> str:
    """The term form's grammar in Lark EBNF."""
    return render(term_rules(constants), "lark", "root" if fenced else "program")


def term_grammar_form(constants: int) -> str:
    """The grammar form of a term with at most ``constants`` constants: ``term`` at the
    maximum (what every term request said before the room was counted), else ``term:N``."""
    return "term" if constants == TERM_CONSTANTS else f"term:{constants}"


def grammar_text(mode: str, form: str = "program") -> str:
    """The decoding grammar sent for ``mode`` (gbnf | vllm) and grammar ``form`` (program |
    term | term:N, :func:`term_grammar_form`): what a request carries and what its
    cassette key digests."""
    if form == "term" or form.startswith("term:"):
        n = TERM_CONSTANTS if form == "term" else int(form.partition(":")[2])
        return term_gbnf(constants=n) if mode == "gbnf" else term_lark(constants=n)
    return strict_gbnf() if mode == "gbnf" else strict_lark()
