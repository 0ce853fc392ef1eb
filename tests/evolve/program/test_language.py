"""The program language: the whitelist rejects hostile input before anything runs,
normalisation gives one id per program (the numpy and numba forms: test_codegen.py)."""

from __future__ import annotations

import builtins
import hashlib
import re
from pathlib import Path

import numpy as np
import pytest
from program_text import GOOD, HEAD, prog

from evolve.program.codegen import step_model
from evolve.program.language import (
    MAX_COMPLEXITY,
    Program,
    ProgramError,
    parse_program,
)

SENTINEL = Path("/tmp/evolve_language_test_pwned")


def many_consts(n: int) -> str:
    return "CONSTANTS = {" + ", ".join(f'"k{i}": (1.0, 0.0, 2.0)' for i in range(n)) + "}\n"


W = str(SENTINEL)
# (label, source, rule): every one must be rejected with that rule, executing nothing.
BAD: list[tuple[str, str | bytes, str]] = [
    ("import_top", "import os\n" + prog("return c.a"), "import"),
    ("from_import", "from os import path\n" + prog("return c.a"), "import"),
    ("import_in_body", prog("import os\nreturn c.a"), "import"),
    ("dunder_import_call", prog(f"return __import__('os').system('touch {W}')"), "call"),
    ("eval_call", prog("return eval('1')"), "call"),
    ("exec_call", prog(f"x = exec('open(\"{W}\", \"w\")')\nreturn c.a"), "call"),
    ("open_call", prog(f"x = open('{W}', 'w')\nreturn c.a"), "call"),
    ("getattr_call", prog("return getattr(f, '__class__')"), "call"),
    ("globals_call", prog("return globals()"), "call"),
    ("call_local", prog("x = c.a\nreturn x(1.0)"), "call"),
    ("call_method", prog("return f.pf_gemm.bit_length()"), "call"),
    ("keyword_arg", prog("return maximum(c.a, x2=1.0)"), "call"),
    ("starred_arg", prog("return maximum(*c.a)"), "call"),
    ("arity", prog("return sqrt(c.a, 2.0)"), "call"),
    ("dunder_attr", prog("return f.__class__"), "attribute"),
    ("attr_chain", prog("return f.pf_gemm.real"), "attribute"),
    ("const_dunder", prog("return c.__dict__"), "attribute"),
    ("np_call", prog("return np.exp(c.a)"), "call"),
    ("np_attr", prog("return np.pi + c.a"), "attribute"),
    ("math_attr", prog("return math.pi"), "attribute"),
    ("nfkc_dunder", prog("return \uff46.__class__"), "attribute"),
    ("r_in_step", prog("return r.input_tokens"), "attribute"),
    ("for_loop", prog("x = c.a\nfor i in f:\n    x = x + 1\nreturn x"), "loop"),
    ("while_loop", prog("while True:\n    pass\nreturn c.a"), "loop"),
    ("list_comp", prog("return maximum([x for x in f], c.a)"), "comprehension"),
    ("generator", prog("return maximum((x for x in f), c.a)"), "comprehension"),
    ("dict_comp", prog("x = {k: 1 for k in f}\nreturn c.a"), "comprehension"),
    ("lambda", prog("g = lambda: 1\nreturn c.a"), "lambda"),
    ("walrus", prog("return (y := f.tp) + c.a"), "walrus"),
    ("fstring", prog('x = f"{f.tp}"\nreturn c.a'), "literal"),
    ("string", prog("x = 'abc'\nreturn c.a"), "literal"),
    ("bytes_lit", prog("x = b'abc'\nreturn c.a"), "literal"),
    ("bool_lit", prog("return c.a + True"), "literal"),
    ("none_lit", prog("return None"), "literal"),
    ("complex_lit", prog("return c.a + 1j"), "literal"),
    ("inf_lit", prog("return c.a + 1e999"), "literal"),
    ("subscript", prog("return f[0]"), "subscript"),
    ("slice", prog("x = c.a\nreturn x[1:2]"), "subscript"),
    ("global_stmt", prog(f"global PWNED\nPWNED = open('{W}', 'w')\nreturn c.a"), "global"),
    ("decorator", '"""d"""\n' + HEAD + "@staticmethod\ndef step_time(f, c):\n    return c.a\n",
     "signature"),
    ("extra_param", HEAD + "def step_time(f, c, d):\n    return c.a\n", "signature"),
    ("default_param", HEAD + "def step_time(f, c=1):\n    return c.a\n", "signature"),
    ("kwargs_param", HEAD + "def step_time(f, c, **k):\n    return c.a\n", "signature"),
    ("annotation", HEAD + "def step_time(f: int, c):\n    return c.a\n", "signature"),
    ("async_def", HEAD + "async def step_time(f, c):\n    return c.a\n", "signature"),
    ("huge_exponent", prog("return f.tp ** 100"), "power"),
    ("neg_exponent", prog("return f.tp ** -5"), "power"),
    ("feature_exponent", prog("return f.tp ** f.layers"), "power"),
    ("wide_const_exponent", prog("return f.tp ** c.a"), "power"),
    ("exponent_div_zero", prog("return f.tp ** (1.0 / c.a)"), "power"),
    ("exponent_local", prog("x = 2.0\nreturn f.tp ** x"), "power"),
    ("unknown_feature", prog("return f.gpu_temperature"), "feature"),
    ("undeclared_const", prog("return c.zz"), "constant"),
    ("complexity", prog("return " + " + ".join(["c.a"] * (MAX_COMPLEXITY + 2))), "complexity"),
    ("too_many_where", prog("x = c.a\n" + "".join(
        f"x = where(f.tp < {i}.0, x, c.a)\n" for i in range(4)) + "return x"), "where"),
    ("too_many_constants", '"""d"""\n' + many_consts(11) + "def step_time(f, c):\n"
     "    return " + " + ".join(f"c.k{i}" for i in range(11)) + "\n", "constants"),
    ("bad_bounds", prog("return c.a", 'CONSTANTS = {"a": (1.0, 5.0, 5.0)}\n'), "constants"),
    ("init_outside", prog("return c.a", 'CONSTANTS = {"a": (11.0, 0.0, 10.0)}\n'),
     "constants"),
    ("unmappable_box", prog("return c.a", 'CONSTANTS = {"a": (5.0, -1e308, 1e308)}\n'),
     "constants"),
    ("subnormal_bound", prog("return c.a", 'CONSTANTS = {"a": (1.0, 1e-310, 10.0)}\n'),
     "constants"),
    ("string_bound", prog("return c.a", 'CONSTANTS = {"a": (1.0, "0", 10.0)}\n'),
     "constants"),
    ("call_in_bound", prog("return c.a", f'CONSTANTS = {{"a": (1.0, 0.0, open("{W}"))}}\n'),
     "constants"),
    ("dunder_const_name", prog("return c.a", 'CONSTANTS = {"__init__": (1.0, 0.0, 2.0)}\n'),
     "constants"),
    ("dup_const", prog("return c.a", 'CONSTANTS = {"a": (1.0, 0., 2.), "a": (1., 0., 2.)}\n'),
     "constants"),
    ("constants_not_dict", prog("return c.a", "CONSTANTS = dict(a=(1.0, 0.0, 2.0))\n"),
     "constants"),
    ("missing_constants", '"""d"""\ndef step_time(f, c):\n    return 1.0\n', "constants"),
    ("syntax", prog("return c.a +"), "syntax"),
    ("nul_byte", prog("return c.a") + "\x00", "syntax"),
    ("non_utf8", b'"""d"""\n' + HEAD.encode() + b"def step_time(f, c):\n    return c.a\n"
     b"# \xff\xfe\n", "encoding"),
    ("oversize", prog("return c.a") + "#" + "x" * 30_000 + "\n", "size"),
    ("deep_nesting", prog("return " + "-(" * 90 + "c.a" + ")" * 90), "size"),
    ("parser_recursion", prog("return " + "+".join(["c.a"] * 4000)), "size"),
    ("parser_memory", prog("return " + "-" * 15000 + "c.a"), "size"),
    ("nested_calls", prog("return " + "sqrt(" * 300 + "c.a" + ")" * 300), "syntax"),
    ("class_def", "class X:\n    pass\n" + prog("return c.a"), "module"),
    ("module_expr", f"open('{W}', 'w')\n" + prog("return c.a"), "module"),
    ("module_assign", "X = 1\n" + prog("return c.a"), "module"),
    ("missing_step", '"""d"""\n' + HEAD, "module"),
    ("dup_step", prog("return c.a") + "def step_time(f, c):\n    return c.a\n", "module"),
    ("dup_constants", prog("return c.a") + HEAD, "module"),
    ("compare_outside", prog("return c.a + (f.tp < 2.0)"), "compare"),
    ("chained_compare", prog("return where(0.0 < f.tp < 2.0, c.a, 1.0)"), "compare"),
    ("eq_compare", prog("return where(f.tp == 2.0, c.a, 1.0)"), "compare"),
    ("where_no_compare", prog("return where(f.tp, c.a, 1.0)"), "compare"),
    ("bool_op", prog("return c.a and f.tp"), "operator"),
    ("floordiv", prog("return c.a // f.tp"), "operator"),
    ("modulo", prog("return c.a % f.tp"), "operator"),
    ("xor", prog("return c.a ^ f.tp"), "operator"),
    ("not_op", prog("return not c.a"), "operator"),
    ("uadd", prog("return +c.a"), "operator"),
    ("ifexp", prog("return c.a if f.tp else 1.0"), "expression"),
    ("yield", prog("return (yield c.a)"), "expression"),
    ("list_literal", prog("return maximum([1.0], c.a)"), "expression"),
    ("dict_literal", prog("return maximum({}, c.a)"), "expression"),
    ("use_before_def", prog("x = y + 1.0\ny = c.a\nreturn x"), "name"),
    ("self_reference", prog("x = x + 1.0\nreturn c.a"), "name"),
    ("bare_f", prog("return f"), "name"),
    ("builtins_name", prog("return __builtins__"), "name"),
    ("assign_reserved", prog("f = 1.0\nreturn c.a"), "name"),
    ("assign_attr", prog("c.a = 1.0\nreturn c.a"), "name"),
    ("tuple_unpack", prog("x, y = 1.0, 2.0\nreturn c.a"), "name"),
    ("chain_assign", prog("x = y = 1.0\nreturn c.a"), "name"),
    ("non_ascii_local", prog("x\u0301 = c.a\nreturn x\u0301"), "name"),  # Go refuses it
    ("non_ascii_constant", prog("return c.a\u00b7b", 'CONSTANTS = {"a\u00b7b": (1.0, 0.0, 2.0)}\n'),
     "constants"),
    ("subscript_assign", prog("f[0] = 1.0\nreturn c.a"), "subscript"),
    ("aug_assign", prog("x = c.a\nx += 1.0\nreturn x"), "statement"),
    ("ann_assign", prog("x: float = c.a\nreturn x"), "statement"),
    ("return_not_last", prog("return c.a\nx = 1.0"), "statement"),
    ("no_return", prog("x = c.a"), "statement"),
    ("bare_return", prog("return"), "statement"),
    ("if_stmt", prog("if c.a:\n    pass\nreturn c.a"), "statement"),
    ("try_stmt", prog("try:\n    x = 1.0\nexcept Exception:\n    x = 2.0\nreturn x"),
     "statement"),
    ("with_stmt", prog(f"with open('{W}', 'w') as fh:\n    pass\nreturn c.a"), "statement"),
    ("nested_def", prog("def g():\n    return 1\nreturn c.a"), "statement"),
    ("expr_stmt", prog(f"open('{W}', 'w')\nreturn c.a"), "statement"),
    ("del_stmt", prog("x = c.a\ndel x\nreturn c.a"), "statement"),
    ("raise_stmt", prog("raise SystemExit(1)\nreturn c.a"), "statement"),
    ("queue_reads_f", prog("return c.a") + "def queueing_time(r, c):\n    return f.tp\n",
     "attribute"),
    ("queue_unknown_field", prog("return c.a") +
     "def queueing_time(r, c):\n    return r.prompt_len\n", "feature"),
    ("queue_signature", prog("return c.a") + "def queueing_time(f, c):\n    return c.a\n",
     "signature"),
]


def test_table_is_large_and_labels_unique():
    assert len(BAD) >= 40
    assert len({label for label, _, _ in BAD}) == len(BAD)


def test_readme_counts_this_table():
    """The README's "N hostile programs tested" is this table's size (it drifted once)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    counts = re.findall(r"\((\d+) hostile programs tested\)", readme)
    assert counts == [str(len(BAD))]


@pytest.fixture()
def no_exec(monkeypatch):
    """Fail loudly if anything calls exec/eval/open/__import__ while checking a program."""
    SENTINEL.unlink(missing_ok=True)

    def boom(*_a, **_k):
        raise AssertionError("program checking must not execute anything")

    real_import = builtins.__import__

    def guarded_import(name, *a, **k):
        if name in ("os", "subprocess", "shutil"):
            boom()
        return real_import(name, *a, **k)

    for name in ("exec", "eval", "open"):
        monkeypatch.setattr(builtins, name, boom)
    monkeypatch.setattr(builtins, "__import__", guarded_import)
    yield
    assert not SENTINEL.exists()
    assert not hasattr(builtins, "PWNED")


@pytest.mark.parametrize(("label", "source", "rule"), BAD, ids=[b[0] for b in BAD])
def test_rejected_with_rule_without_executing(label, source, rule, no_exec):
    with pytest.raises(ProgramError) as info:
        parse_program(source)
    err = info.value
    assert err.rule == rule, f"{label}: got {err.rule}: {err}"
    assert err.reason
    assert err.rule in str(err)


def test_error_locates_line_and_node():
    with pytest.raises(ProgramError) as info:
        parse_program(prog("x = c.a\ny = f.nope * 2.0\nreturn x"))
    err = info.value
    assert err.rule == "feature"
    assert err.line == 5  # docstring, CONSTANTS, def, x = ..., y = ...
    assert "f.nope" in err.node
    assert "line 5" in str(err)




def test_good_program_summary():
    p = parse_program(GOOD)
    assert p.const_names == ("a", "b")  # sorted; the unused constant is dropped
    assert p.init_vector().tolist() == [1.5, 100.0]
    lo, hi = p.bounds()
    assert lo.tolist() == [0.1, 1.0] and hi.tolist() == [10.0, 1e4]
    assert p.features == frozenset({"pf_gemm", "pf_attn", "weight_read", "kv_read",
                                    "prefill_tokens", "tp", "layers"})
    # ops: * + | + | where > maximum | clip sqrt log1p abs unary- ** and three +
    assert p.complexity == 15
    assert p.n_where == 1
    assert p.id == hashlib.sha256(p.source.encode()).hexdigest()
    assert p.post_decode_index is None and p.queue_tree is None
    assert p.step_tree.name == "step_time"
    assert "function docstrings" not in p.source and "unused" not in p.source


def test_bytes_input_and_idempotent_normalisation():
    p = parse_program(GOOD.encode("utf-8"))
    again = parse_program(p.source)
    assert again.id == p.id and again.source == p.source
    assert again == p and hash(again) == hash(p)
    assert parse_program(b"\xef\xbb\xbf" + GOOD.encode("utf-8")).id == p.id  # a BOM is no code


VARIANTS = [
    # constants reordered, ints for floats, list instead of tuple, extra parentheses,
    # comments, blank lines, a different docstring indentation and quote style
    '"""Idea.\n    second line"""\nCONSTANTS = {"b": [2, 0, 10], "a": (1.0, 0.0, 10.0)}\n'
    "def step_time(f, c):\n    # a comment\n    x = (c.a * f.pf_gemm)\n\n"
    "    return ((x + c.b))\n",
    "'''Idea.\n        second line'''\nCONSTANTS = {\n    'a': (1, 0, 10),\n"
    "    'b': (2.0, 0.0, 10.0),\n}\n\n\ndef step_time(f, c):\n"
    "    x = c.a * f.pf_gemm  # trailing\n    return x + c.b\n",
    '"""\nIdea.\nsecond line\n"""\nCONSTANTS = {"a": (1.0, 0.0, 1e1), "b": (2.0, 0, 10),\n'
    '             "z_unused": (1.0, 0.0, 2.0)}\ndef step_time(f, c):\n'
    '    """doc"""\n    x = c.a*f.pf_gemm\n    return x+c.b\n',
]


def test_formatting_variants_share_one_id():
    ids = {parse_program(v).id for v in VARIANTS}
    assert len(ids) == 1


def test_different_programs_differ():
    base = parse_program(VARIANTS[0])
    other = parse_program(VARIANTS[0].replace("x + c.b", "x - c.b"))
    bounds = parse_program(VARIANTS[0].replace("[2, 0, 10]", "[2, 0, 11]"))
    assert len({base.id, other.id, bounds.id}) == 3


def test_queue_and_special_constants():
    src = prog("return c.a * f.batch_size + 1.0",
               'CONSTANTS = {"a": (1.0, 0.0, 10.0), "q": (100.0, 0.0, 1e5),'
               ' "post_decode_us": (700.0, 0.0, 5e4), "output_token_us": (40.0, 0.0, 500.0)}\n')
    src += "def queueing_time(r, c):\n    return c.q + 0.5 * r.input_tokens\n"
    p = parse_program(src)
    assert p.const_names == ("a", "output_token_us", "post_decode_us", "q")
    assert p.output_token_index == 1 and p.post_decode_index == 2
    assert p.queue_tree is not None and p.complexity == 4
    model = step_model(p)
    R = np.array([[100.0, 200.0, 0.0], [10.0, 10.0, 10.0]])
    q = model.queue_fn(R, p.init_vector())
    assert q.tolist() == [150.0, 200.0, 100.0]


def test_program_is_frozen():
    p = parse_program(GOOD)
    with pytest.raises(AttributeError):
        p.id = "x"  # type: ignore[misc]
    assert isinstance(p, Program)


def test_queueing_time_reads_the_request_and_its_server_and_nothing_else():
    """`r.` is the request and the server it arrives at (glossary REQUEST_FIELDS): a
    delay counted in engine steps reads the server; a step feature is not a request's."""
    head = 'CONSTANTS = {"s": (1.0, 0.0, 6.0)}\ndef step_time(f, c):\n    return 1.0\n'
    ok = parse_program(head + "def queueing_time(r, c):\n"
                       "    return c.s * (r.weight_us + 75.0 * r.layers * (1.0 + r.is_moe))"
                       " / r.tp + 0.0 * r.input_tokens\n")
    R = np.array([[100.0], [10.0], [4000.0], [32.0], [2.0], [1.0]])
    assert step_model(ok).queue_fn(R, ok.init_vector()).tolist() == [(4000.0 + 4800.0) / 2]
    with pytest.raises(ProgramError, match=re.escape(
            "queueing_time may read only r.input_tokens / r.output_tokens / r.weight_us /"
            " r.layers / r.tp / r.is_moe")):
        parse_program(head + "def queueing_time(r, c):\n    return r.batch_size\n")
