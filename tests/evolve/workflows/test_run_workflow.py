"""evolve.workflows.run: the flags as a config fragment, the configuration of a new run,
the checks before a search and how a stopped run is continued (no search runs here)."""

from __future__ import annotations

import pytest

from evolve.errors import ClusterLost, UserError
from evolve.workflows.run import (
    LOCAL_MAX_TOKENS,
    RunOptions,
    RunOutcome,
    configure,
    execute,
    overrides,
    resume_command,
)


def test_overrides_hold_only_the_flags_given():
    said: list[str] = []
    over = overrides(RunOptions(seed=3, ray_address="10.0.0.1:6379", no_progress=True,
                                llm="m", llm_base_url="http://u:pw@host:8000/v1",
                                cassette="c.json", replay=True), said.append)
    assert over["run"] == {"seed": 3, "ray_address": "10.0.0.1:6379", "executor": "ray",
                           "progress": False}
    assert over["operator"] == {"kind": "llm"}
    assert over["llm"] == {"model": "m", "base_url": "http://host:8000/v1",
                           "cassette": "c.json", "cassette_mode": "replay"}
    assert len(said) == 1 and "user:password@" in said[0]  # the secret never echoed
    assert "pw" not in said[0]
    assert overrides(RunOptions(), said.append) == {}


@pytest.mark.parametrize(("opts", "message"), [
    (RunOptions(llm=" "), "--llm: blank"),
    (RunOptions(record=True), "need --cassette"),
    (RunOptions(data=""), "--data"),
])
def test_overrides_refuse_bad_flags(opts, message):
    with pytest.raises(UserError, match=message):
        overrides(opts, print)


def test_configure_a_new_run_applies_the_flags_and_the_local_defaults():
    plan = configure(RunOptions(seed=5, generations=2, llm="local"), print)
    assert plan.resume is None and plan.source is None
    assert (plan.cfg.run.seed, plan.cfg.run.generations) == (5, 2)
    assert plan.cfg.llm.constrain == "gbnf" and plan.cfg.llm.concurrency == 1
    assert plan.cfg.llm.max_tokens == LOCAL_MAX_TOKENS


@pytest.mark.parametrize(("opts", "message"), [
    (RunOptions(break_lock=True), "--break-lock needs --resume"),
    (RunOptions(resume=1, config="x.toml"), "--config cannot be combined with --resume"),
])
def test_configure_refuses_flags_that_do_not_go_together(opts, message):
    with pytest.raises(UserError, match=message):
        configure(opts, print)


def test_a_missing_data_directory_of_the_config_file_is_blamed_on_its_key(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text(f'[run]\ndata = "{tmp_path / "nowhere"}"\n')
    plan = configure(RunOptions(config=str(toml)), print)
    with pytest.raises(UserError, match=r"c\.toml: key 'run\.data'"):
        execute(plan, None, False, RunOutcome(plan.cfg), print)


def test_resume_command_and_which_errors_leave_work_to_resume():
    cfg = configure(RunOptions(archive="runs/a b.db", data="/d"), print).cfg
    assert resume_command(cfg, 4, "runs/a b.db") == (
        "evolve run --resume 4 --archive 'runs/a b.db' --data /d")
    done = RunOutcome(cfg, where="runs/a b.db", run_id=4)
    assert not done.resumable(RuntimeError())  # not searching yet: nothing journaled
    done.searching = True
    assert done.resumable(RuntimeError()) and done.resumable(ClusterLost("gone"))
    assert not done.resumable(UserError("bad input"))  # a resume would only repeat it
    assert done.resume_command().startswith("evolve run --resume 4 ")
