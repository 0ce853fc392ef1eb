"""Go export, translation side: readable and exact Go for each construct, gofmt's layout, the
constant lookups per scope, the errors, and the ``evolve export-go`` command (standalone and
from an archive). Numerical parity with numpy is in test_go_parity.py.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from go_programs import MODELS, OWN_PROGRAMS

from evolve.errors import ExportError
from evolve.export.go.expr import Atom, Binary, Call, Unary, format_expr
from evolve.export.go.harness import find_go, go_env, gofmt_path
from evolve.export.go.writer import BLIS_COMMIT, GroupInfo, export_go, type_prefix
from evolve.program.language import parse_program

ROOT = Path(__file__).resolve().parents[3]
GO = find_go()
needs_go = pytest.mark.usefixtures("go_toolchain")


def test_blis_commit_recorded():
    assert len(BLIS_COMMIT) == 40
    assert BLIS_COMMIT in (ROOT / "docs" / "blis.md").read_text()


@needs_go
def test_printer_matches_gofmt(tmp_path):
    """format_expr is a fixed point of gofmt on random expressions of every node kind."""
    rng = random.Random(3)
    atoms = [Atom("x"), Atom("f.PfGemm"), Atom("2.0"), Atom("1e-05"), Atom("c.A")]

    def gen(d: int):
        r = rng.random()
        if d == 0 or r < 0.2:
            return rng.choice(atoms)
        if r < 0.3:
            return Unary("-", gen(d - 1))
        if r < 0.45:
            fn, n = rng.choice([("math.Max", 2), ("math.Sqrt", 1), ("math.Pow", 2),
                                ("math.Min", 2)])
            return Call(fn, tuple(gen(d - 1) for _ in range(n)))
        return Binary(rng.choice(["+", "-", "*", "/", "+", "*"]), gen(d - 1), gen(d - 1))

    lines = ["package p", "", "func g() {"]
    for j in range(400):
        e = gen(rng.randint(1, 5))
        if rng.random() < 0.15:
            e = Binary(rng.choice(["<", ">=", "<=", ">"]), e, gen(2))
        lines.append(f"\tv{j} := {format_expr(e)}")
    path = tmp_path / "p.go"
    path.write_text("\n".join([*lines, "}"]) + "\n")
    res = subprocess.run([gofmt_path(GO), "-d", str(path)], capture_output=True, text=True,
                         env=go_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout == "", res.stdout[:3000]


def test_translation_is_readable_and_exact():
    prog = parse_program(OWN_PROGRAMS["all_calls"])
    src = export_go(prog, {"global": {n: 1.0 for n in prog.const_names}}, "global")
    assert "math.Min(math.Max(math.Exp(-f.BatchSize/64.0), 0.05), 0.9)" in src
    assert "// over = where(f.kv_max > c.knee" in src  # the Python line above its Go
    assert "+ tail - -c.B" in src
    prog = parse_program(OWN_PROGRAMS["powers"])
    src = export_go(prog, {"global": {"p": 2.0}}, "global")
    assert "f.Tp*f.Tp" in src  # ** 2 on an atom is x*x, like numpy's square
    assert "math.Pow(f.BlisPfAttn+1.0, c.P)" in src
    nested = parse_program(OWN_PROGRAMS["nested_where"])
    src = export_go(nested, {"global": {n: 2.0 for n in nested.const_names}}, "global")
    assert "t = t*0.75 + 6.0" in src  # pure-literal parts folded in float64
    assert src.index("where1 :=") < src.index("\ta := c.K2")  # inner where first
    assert "\tb := f.KvMax * f.KvMax" not in src and "\tb := " in src  # where assigns b


def test_export_errors():
    prog = parse_program(OWN_PROGRAMS["constant_only"])
    with pytest.raises(ExportError, match="no value"):
        export_go(prog, {"global": {}}, "global")
    with pytest.raises(ExportError, match="scope"):
        export_go(prog, {"global": {"step": 1.0}}, "per_gpu")
    with pytest.raises(ExportError, match="exactly one"):
        export_go(prog, {"a": {"step": 1.0}, "b": {"step": 2.0}}, "global")
    bad = parse_program("CONSTANTS = {}\ndef step_time(f, c):\n    return f.tp / (1.0 - 1.0)\n")
    with pytest.raises(ExportError, match="division by zero"):
        export_go(bad, {"global": {}}, "global")


def test_per_model_lookup_lists_aliases():
    prog = parse_program(OWN_PROGRAMS["constant_only"])
    info = {"llama-2-7b": GroupInfo(("llama-2-7b", "meta-llama/llama-2-7b-hf"))}
    src = export_go(prog, {"llama-2-7b": {"step": 10.0}, "other": {"step": 2.5}},
                    "per_model", info)
    assert 'case "llama-2-7b", "llama-2-7b-hf", "meta-llama/llama-2-7b-hf":' in src
    assert 'case "other":' in src
    assert "strings.ToLower(model)" in src


def test_pooled_lookup_falls_back_to_the_global_set():
    """Pooled constants: measured models by name, any other model gets the global set."""
    prog = parse_program(OWN_PROGRAMS["constant_only"])
    src = export_go(prog, {"llama-2-7b": {"step": 10.0}, "global": {"step": 2.5}}, "pooled")
    assert 'case "llama-2-7b":' in src and 'case "global"' not in src
    assert "no fitted constants" not in src
    tail = src[src.index("ConstsFor(model string)"):]
    tail = tail[:tail.index("\n}\n")]
    assert tail.rstrip().endswith("2.5}, nil")


def test_cli_pooled_export_says_what_an_unmeasured_model_gets(tmp_path, capsys):
    """The global set of a frontier pick is not chosen for transfer: export-go says so, and
    names the rule for a model nobody measured; a per-model export has no such fallback."""
    from evolve.cli.main import main

    prog_file = tmp_path / "prog.py"
    prog_file.write_text(OWN_PROGRAMS["constant_only"])
    for scope, groups in (("pooled", ("llama-2-7b", "global")), ("per_model", ("llama-2-7b",))):
        consts = json.dumps({g: {"step": 2.5} for g in groups})
        assert main(["export-go", str(prog_file), "--constants", consts, "--scope", scope,
                     "--no-refit", "-o", str(tmp_path / "m.go")]) == 0
        err = capsys.readouterr().err
        assert ("export the `layered` rule" in err) == (scope == "pooled"), err



def test_cli_standalone(tmp_path):
    from evolve.cli.main import main

    prog_file = tmp_path / "prog.py"
    prog_file.write_text(OWN_PROGRAMS["all_calls"])
    prog = parse_program(OWN_PROGRAMS["all_calls"])
    consts = {"llama-2-7b": {n: 1.5 for n in prog.const_names}}
    out = tmp_path / "evolved.go"
    rc = main(["export-go", str(prog_file), "--constants", json.dumps(consts),
               "--scope", "per_model", "--no-refit", "-o", str(out)])
    assert rc == 0
    text = out.read_text()
    assert type_prefix(prog.id) + "Model" in text
    assert 'case "llama-2-7b"' in text
    # the header carries the program's source, line by line, as Go comments
    header = text.split("// Program source:", 1)[1]
    for line in prog.source.rstrip("\n").splitlines():
        want = ("// \t" + line.replace("\t", "    ")).rstrip() if line.strip() else "//"
        assert want in header.splitlines(), line
    rc = main(["export-go", str(prog_file), "--constants", json.dumps({"x": {}}),
               "--scope", "per_model", "-o", str(out)])
    assert rc == 2


@pytest.mark.parametrize(("consts", "needle"), [
    ('{"k": NaN}', "k = nan is not a finite number"),  # names the constant
    (b'{"k": \xff}', "not UTF-8 text"),                # a file, not JSON text
    ("[" * 100_000, "nested too deeply"),
    ("[1, 2]", "--constants: expected a JSON object"),  # as text: once read as a file name
])
def test_cli_bad_constants_are_one_line(tmp_path, capsys, consts, needle):
    from evolve.cli.main import main

    prog_file = tmp_path / "prog.py"
    prog_file.write_text(OWN_PROGRAMS["constant_only"].replace('"step"', '"k"')
                         .replace("c.step", "c.k"))
    arg = consts
    if isinstance(consts, bytes) or consts.startswith("[["):
        (tmp_path / "c.json").write_bytes(consts if isinstance(consts, bytes) else
                                          consts.encode())
        arg = str(tmp_path / "c.json")
    assert main(["export-go", str(prog_file), "--constants", arg]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evolve export-go: error: --constants") and needle in err, err
    assert "\n" not in err


def test_cli_division_by_zero_names_the_file(tmp_path, capsys):
    from evolve.cli.main import main

    prog_file = tmp_path / "zero.py"
    prog_file.write_text(OWN_PROGRAMS["constant_only"].replace("return c.step",
                                                               "return c.step / 0"))
    assert main(["export-go", str(prog_file)]) == 2
    err = capsys.readouterr().err
    assert f"{prog_file}: division by zero" in err, err


def test_cli_per_scenario_needs_one_group(tmp_path, capsys):
    from evolve.cli.main import main

    prog_file = tmp_path / "prog.py"
    prog_file.write_text(OWN_PROGRAMS["constant_only"])
    consts = json.dumps({"run-a": {"step": 10.0}, "run-b": {"step": 20.0}})
    args = ["export-go", str(prog_file), "--constants", consts, "--scope", "per_scenario",
            "--no-refit"]
    assert main(args) == 2
    assert "pick one scenario with --model" in capsys.readouterr().err
    assert main([*args, "--model", "run-b"]) == 0
    text = capsys.readouterr().out
    assert "One constant set (per_scenario scope) serves every model." in text
    assert "Consts{Step: 20.0}, nil" in text


@pytest.mark.real_data
def test_cli_from_archive(tmp_path, capsys):
    """Archive mode: constants, scope and scores of the latest accepted evaluation."""
    from evolve.archive import Archive
    from evolve.archive.models import Evaluation, ProgramRow
    from evolve.cli.main import main

    prog = parse_program((ROOT / "seeds" / "linear.py").read_text())
    consts = {m[0]: {n: 1.0 + j for j, n in enumerate(prog.const_names)} for m in MODELS}
    metrics = {"run-a@0-120s": {"split": "train", "ape": {"e2e_mean": 0.1, "ttft_mean": 0.3},
                                "mode": "closed_loop_slice"},
               "run-b": {"split": "test", "ape": {"e2e_mean": 0.2, "ttft_mean": 0.4}}}
    db = tmp_path / "a.db"
    with Archive(db) as a:
        rid = a.create_run(7, {"fit": {"scope": "per_model"}}, {}, None)
        a.commit_generation(rid, 0, [
            ProgramRow(run_id=rid, id=prog.id, seq=0, source=prog.source, parent_ids=[],
                       operator="seed", generation=0, complexity=prog.complexity,
                       n_features=len(prog.features), fingerprint=None),
            Evaluation(run_id=rid, generation=0, seq=0, program_id=prog.id, kind="seed",
                       operator="seed", corpus_version="abc", constants=consts,
                       metrics=metrics, loss=0.25, complexity=prog.complexity, n_evals=10,
                       status="accepted", reason="")])
    assert main(["export-go", prog.id[:10], "--archive", str(db), "--no-refit"]) == 0
    text = capsys.readouterr().out
    assert "// Archive: a.db, run 1 (seed 7), generation 0, operator seed" in text
    assert "// Train loss: 0.25" in text
    assert "// Scores (test, 1 runs, teacher forced): mean APE E2E 20.00 %, TTFT 40.00 %" in text
    assert "// Scores (train, 1 stage slices, closed loop): mean APE E2E 10.00 %" in text
    assert "Constant scope: per_model (codellama-34b, llama-2-70b, llama-2-7b, mixtral-8x7b)" \
        in text
    assert '"meta-llama/llama-2-7b-hf"' in text  # aliases from the data directory
    assert main(["export-go", prog.id[:10], "--archive", str(db), "--model",
                 "mistralai/Mixtral-8x7B-v0.1", "--no-refit"]) == 0
    text = capsys.readouterr().out
    assert "Constant scope: per_model (mixtral-8x7b)" in text
    assert main(["export-go", "ffff", "--archive", str(db)]) == 2
    assert main(["export-go", prog.id[:10], "--archive", str(db), "--alias",
                 "llama-2-7b=Acme/Llama-2-7B-Chat", "--no-refit"]) == 0
    assert '"acme/llama-2-7b-chat", "llama-2-7b"' in capsys.readouterr().out
    assert main(["export-go", prog.id[:10], "--archive", str(db), "--alias", "x=y"]) == 2
    capsys.readouterr()
    for flag, value in (("--constants", '{"x": 1}'), ("--scope", "per_scenario")):
        assert main(["export-go", prog.id[:10], "--archive", str(db), flag, value]) == 2
        assert capsys.readouterr().err == (
            f"evolve export-go: error: {flag}: applies to a program file; {prog.id[:10]} is "
            "read from the archive with its own fitted constants and scope\n")
    # a --data that does not exist is refused: the export would lose the model-id aliases
    assert main(["export-go", prog.id[:10], "--archive", str(db), "--data",
                 str(tmp_path / "typo")]) == 2
    assert f"{tmp_path / 'typo'}: data directory not found" in capsys.readouterr().err


@needs_go
def test_async_clock_is_added_only_when_asked_and_is_gofmt_clean(tmp_path):
    """``async_steps``: StepTime records the step, QueueingTime holds the request back
    (docs/blis.md, "The engine loop"); without it neither method touches a clock."""
    prog = parse_program((ROOT / "seeds" / "layered.py").read_text())
    consts = {"global": {s.name: s.init for s in prog.constants}}
    plain = export_go(prog, consts)
    carried = export_go(prog, consts, async_steps=True)
    low = "e" + type_prefix(prog.id)[1:]
    assert "async" not in plain.split("package latency")[1]
    assert f"type {low}Async struct" in carried
    assert "m.async.stepBegins(batch, d)" in carried
    assert f"return m.async.hold(req, {low}Ticks(m.QueueingTimeUs(req)))" in carried
    path = tmp_path / "carried.go"
    path.write_text(carried)
    res = subprocess.run([gofmt_path(GO), "-l", str(path)], capture_output=True, text=True,
                         env=go_env())
    assert res.returncode == 0 and res.stdout == "", res.stdout + res.stderr
