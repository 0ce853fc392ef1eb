"""The program grammars (evolve/program/grammar.py, evolve/program/grammar_strict.py) against the
checker.

Why: the grammar sent to a server must never exclude a program of the language the search
relies on (seeds, archived programs), and must exclude what the checker rejects for the
reasons small models fail (loops, open(), unknown attributes, unbalanced parentheses,
prose). Parsed with the real ``lark`` package (Earley); the GBNF rendering of the same
rules is loaded by llama.cpp's own grammar parser.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import pytest
from lark import Lark
from lark.exceptions import LarkError

from evolve.errors import ProgramError
from evolve.program.grammar import gbnf, lark
from evolve.program.grammar_strict import strict_gbnf, strict_lark
from evolve.program.language import parse_program

ROOT = Path(__file__).resolve().parents[3]
SEEDS = sorted((ROOT / "seeds").glob("*.py"))

STRICT_PROGRAMS = [
    '"""Overhead plus scaled compute."""\nCONSTANTS = {"k0": (3000.0, 0.0, 10000.0), '
    '"k1": (1.5, 0.0, 10.0)}\n\ndef step_time(f, c):\n    return c.k0 + c.k1 * '
    'maximum(f.pf_gemm + f.dc_gemm, f.weight_read + f.kv_read)\n',
    '"""Regimes."""\nCONSTANTS = {"k0": (0.5, 0.0, 1.0)}\n\ndef step_time(f, c):\n'
    '    return where(f.batch_size < 8, f.weight_read, c.k0 * f.pf_gemm) ** 1.5 + 2\n',
]

# (what the checker rejects, why): none may pass any grammar.
REJECTED = {
    "loop": STRICT_PROGRAMS[0].replace(
        "    return", "    for i in range(3):\n        x = 1\n    return"),
    "open": STRICT_PROGRAMS[0].replace("c.k0 +", "open('x') +"),
    "unknown attribute": STRICT_PROGRAMS[0].replace("f.pf_gemm", "f.gpu_name"),
    "dunder attribute": STRICT_PROGRAMS[0].replace("f.pf_gemm", "f.__class__"),
    "unbalanced parentheses": STRICT_PROGRAMS[0].replace("f.kv_read)", "f.kv_read"),
    "prose": "Here is an improved program: it adds a term for the KV cache reads.\n",
    "import": "import os\n" + STRICT_PROGRAMS[0],
    "call outside the whitelist": STRICT_PROGRAMS[0].replace("maximum(", "max("),
    "string literal": STRICT_PROGRAMS[0].replace("c.k0 +", "'a' +"),
    "subscript": STRICT_PROGRAMS[0].replace("c.k0 +", "c.k0[0] +"),
    "lambda": STRICT_PROGRAMS[0].replace("c.k0 +", "(lambda: 1)() +"),
    "missing step_time": STRICT_PROGRAMS[0].split("def step_time")[0],
}


@cache
def parser(text: str) -> Lark:
    return Lark(text, parser="earley", lexer="dynamic")


def accepts(grammar: str, text: str) -> bool:
    try:
        parser(grammar).parse(text)
    except LarkError:
        return False
    return True


@pytest.mark.parametrize("path", SEEDS, ids=lambda p: p.stem)
def test_every_seed_parses_as_written_and_normalised(path):
    text = path.read_text(encoding="utf-8")
    assert accepts(lark(fenced=False, layout="free"), text)
    assert accepts(lark(fenced=False, layout="canonical"), str(parse_program(text).source))


@pytest.mark.parametrize("text", STRICT_PROGRAMS)
def test_strict_programs_pass_every_grammar_and_the_checker(text):
    parse_program(text)
    assert accepts(strict_lark(fenced=False), text)
    assert accepts(lark(fenced=False, layout="canonical"), text)
    assert accepts(lark(fenced=False, layout="free"), text)
    assert accepts(strict_lark(), "```python\n" + text + "```")


@pytest.mark.parametrize("why", sorted(REJECTED))
def test_what_the_checker_rejects_no_grammar_accepts(why):
    text = REJECTED[why]
    with pytest.raises(ProgramError):
        parse_program(text)
    for grammar in (lark(fenced=False, layout="free"), lark(fenced=False, layout="canonical"),
                    strict_lark(fenced=False)):
        assert not accepts(grammar, text), why


@pytest.mark.parametrize("bad", [
    '"k0": (3000.0, 0.1, 2.0)',  # init outside its bounds
    '"k0": (5.0, 0.0, 1.0)',
])
def test_strict_grammar_cannot_express_bad_bounds_or_undeclared_constants(bad):
    text = STRICT_PROGRAMS[1].replace('"k0": (0.5, 0.0, 1.0)', bad)
    assert not accepts(strict_lark(fenced=False), text)
    undeclared = STRICT_PROGRAMS[1].replace("c.k0", "c.k1")
    assert not accepts(strict_lark(fenced=False), undeclared)
    with pytest.raises(ProgramError):
        parse_program(undeclared)


def test_gbnf_renderings_load_in_llama_cpp():
    try:
        import llama_cpp
    except ImportError:  # a missing part fails, as in tests/local (never a silent skip)
        pytest.fail("llama-cpp-python is not installed: pip install -e '.[local-llm]' "
                    "(scripts/setup.sh does)", pytrace=False)
    for text in (gbnf(), gbnf(layout="free"), strict_gbnf()):
        llama_cpp.LlamaGrammar.from_string(text, verbose=False)


@pytest.mark.slow
@pytest.mark.real_data
def test_every_archived_program_of_a_short_run_parses(tmp_path):
    from evolve.archive import Archive
    from evolve.config.schema import Config, apply_dict, validate
    from evolve.search.loop import Search

    sys.path.insert(0, str(ROOT / "tests" / "search"))
    from test_golden_archive import CONFIG

    cfg = Config()
    apply_dict(cfg, {**CONFIG, "run": {**CONFIG["run"], "generations": 3, "workers": 1}}, "t")
    cfg.run.archive = str(tmp_path / "a.db")
    cfg = validate(cfg, "t")
    with Archive(cfg.run.archive) as archive:
        run = Search(cfg, archive, log=lambda _m: None).run()
        sources = [p.source for p in archive.programs(run.run_id) if p.complexity is not None]
    assert len(sources) > 7
    for source in sources:
        assert accepts(lark(fenced=False, layout="canonical"), source), source
        assert accepts(lark(fenced=False, layout="free"), source), source
