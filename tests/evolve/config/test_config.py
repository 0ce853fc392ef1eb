"""The configuration tree: defaults, TOML round trip, one-line errors, split assignment."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass

import pytest

from evolve.assess.splits import assign_splits
from evolve.cli.main import main
from evolve.config.as_toml import to_toml
from evolve.config.schema import (
    Config,
    ConfigError,
    apply_dict,
    load_config,
    validate,
)


def test_every_field_is_documented():
    import dataclasses

    cfg = Config()
    for sec in dataclasses.fields(cfg):
        for f in dataclasses.fields(getattr(cfg, sec.name)):
            assert f.metadata.get("doc"), f"{sec.name}.{f.name} has no doc"


def test_toml_round_trip(tmp_path):
    cfg = Config()
    cfg.run.seed = 7
    cfg.search.children = 3
    cfg.run.scenarios = ["a", "b"]
    path = tmp_path / "c.toml"
    path.write_text(to_toml(cfg))
    back = load_config(path)
    assert back == cfg


def test_stored_dict_round_trip():
    cfg = Config()
    cfg.fit.scope = "per_model"
    cfg.run.workers = 1
    stored = cfg.stored_dict()
    assert not {"archive", "workers", "progress"} & set(stored["run"])
    back = Config.from_dict(stored, "stored")
    assert back.fit.scope == "per_model"


@pytest.mark.parametrize("text, needle", [
    ("[run]\nsede = 3\n", "unknown key 'run.sede'"),
    ("[nosuch]\nx = 1\n", "unknown key 'nosuch'"),
    ("[search]\nchildren = 'many'\n", "key 'search.children' expects int"),
    ("[search]\nchildren = 2.5\n", "key 'search.children' expects int"),
    ("[run]\nprogress = 1\n", "key 'run.progress' expects bool"),
    ("[fit]\nscope = 'everywhere'\n", "key 'fit.scope' must be one of"),
    ("[split]\nmode = 'random'\n", "key 'split.mode'"),
    ("[search]\nchildren = 0\n", "key 'search.children' out of range"),
    ("[fit]\nstarts = 0\n", "key 'fit.starts' out of range"),
    ("[operator]\nlookahead = 0\n", "key 'operator.lookahead' out of range"),
    ("[llm]\ntemperture = 1.0\n", "unknown key 'llm.temperture'"),
    ("[llm]\ncassette_mode = 'replay'\n", "section 'llm'"),
    ("run = 3\n", "key 'run' must be a table"),
    ("[llm]\nprices = {a = 'x'}\n", "key 'llm.prices' expects dict[str, tuple[float, float]]"),
    ("[run\n", "not valid TOML"),
])
def test_bad_config_is_one_line_naming_file_and_key(tmp_path, text, needle):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert needle in msg and str(path) in msg and "\n" not in msg


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "none.toml")


def test_int_accepted_for_float():
    cfg = Config()
    apply_dict(cfg, {"run": {"head_seconds": 30}}, "x")
    assert cfg.run.head_seconds == 30.0 and isinstance(cfg.run.head_seconds, float)
    validate(cfg)


@dataclass
class _Sc:
    name: str
    model: str
    workload: str
    split: str


RUNS = [_Sc("a", "7b", "general", "train"), _Sc("b", "7b", "codegen", "validate"),
        _Sc("c", "70b", "general", "train"), _Sc("d", "70b", "reasoning", "test")]


def test_assign_splits():
    assert assign_splits(RUNS, "data") == {"a": "train", "b": "validate", "c": "train",
                                           "d": "test"}
    assert assign_splits(RUNS, "lomo:7b") == {"a": "test", "b": "test", "c": "train",
                                              "d": "validate"}
    assert assign_splits(RUNS, "lowo:codegen") == {"a": "train", "b": "test", "c": "train",
                                                   "d": "validate"}
    with pytest.raises(ConfigError, match="no training runs"):
        assign_splits(RUNS, "lowo:general")
    with pytest.raises(ConfigError, match="no run has model"):
        assign_splits(RUNS, "lomo:13b")
    with pytest.raises(ConfigError, match="no training runs"):
        assign_splits(RUNS[1:2], "data")


def test_print_config_is_documented_toml(capsys):
    assert main(["run", "--print-config", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    data = tomllib.loads(out)
    assert data["run"]["seed"] == 5
    assert "# run seed" in out


def test_simulator_switches_reach_the_run_config(capsys):
    """Async scheduling and whole-prompt caching are on unless a flag turns them off."""
    assert main(["run", "--print-config"]) == 0
    on = tomllib.loads(capsys.readouterr().out)["run"]
    assert on["async_scheduling"] is True and on["prompt_cache"] is True
    assert main(["run", "--print-config", "--no-async-scheduling", "--no-prompt-cache"]) == 0
    off = tomllib.loads(capsys.readouterr().out)["run"]
    assert off["async_scheduling"] is False and off["prompt_cache"] is False


def test_cli_unknown_config_key(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text("[search]\nchilds = 3\n")
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown key 'search.childs'" in err and len(err.splitlines()) == 1


def test_default_toml_is_valid():
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "configs" / "default.toml"
    assert load_config(path) == Config()


def test_llm_flags_pass_through(capsys):
    argv = ["run", "--print-config", "--llm", "qwen", "--llm-base-url", "http://h:1/v1",
            "--cassette", "c.jsonl", "--replay"]
    assert main(argv) == 0
    data = tomllib.loads(capsys.readouterr().out)
    assert data["operator"]["kind"] == "llm"
    assert data["llm"]["model"] == "qwen" and data["llm"]["base_url"] == "http://h:1/v1"
    assert data["llm"]["cassette"] == "c.jsonl" and data["llm"]["cassette_mode"] == "replay"
    assert main(["run", "--print-config", "--record"]) == 2
    assert "--cassette" in capsys.readouterr().err


def test_a_stored_config_without_a_later_key_keeps_the_behaviour_it_was_run_with():
    stored = Config().stored_dict()
    assert Config.from_dict(stored).fit.starts == Config().fit.starts == 3
    del stored["fit"]["starts"]  # a run stored before fit.starts existed fitted once
    assert Config.from_dict(stored).fit.starts == 1
    assert Config.from_dict({}).fit.starts == 1


@pytest.mark.parametrize("text", ["[run]\nseed = " + "9" * 5000 + "\n",
                                  "x = " + "[" * 100_000 + "]" * 100_000 + "\n"])
def test_a_config_toml_cannot_hold_is_one_line(tmp_path, capsys, text):
    """A 5,000-digit integer (Python's int-string limit) or 100,000-deep nesting: one line
    naming the file, exit 2, not an internal error."""
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["run", "--config", str(path), "--print-config"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}: not a config TOML can hold" in err
