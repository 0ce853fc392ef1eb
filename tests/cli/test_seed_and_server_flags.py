"""Flags checked as `evolve run` checks them, and before any work: a fitting ``--seed`` in
[0, 2^63) for fit, generalize and calibrate (they once took -1 where run refused it), and
calibrate's server flags before the data loads (``--tp 0`` and a percentage as
``--gpu-memory-utilization`` were refused after about 5 s of loading)."""

from __future__ import annotations

import pytest

from evolve.cli.main import main


@pytest.mark.parametrize("seed, why", [
    ("-1", "-1: must be an integer in [0, 2^63)"),
    (str(2**63), f"{2**63}: must be an integer in [0, 2^63)"),
    ("7.5", "'7.5': not an integer"),
])
@pytest.mark.parametrize("argv", [
    ["fit", "linear"],
    ["generalize", "linear", "--mode", "lowo"],
    ["calibrate", "linear", "--model-config", "config.json"],
])
def test_a_fitting_seed_outside_runs_range_is_refused(argv, seed, why, capsys):
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--seed", seed])
    assert exc.value.code == 2
    assert f"argument --seed: {why}" in capsys.readouterr().err


def test_the_largest_seed_run_takes_is_taken():
    from evolve.workflows.targets import seed_arg
    assert seed_arg(str(2**63 - 1)) == 2**63 - 1 and seed_arg("0") == 0


@pytest.mark.parametrize("flags, needle", [
    (["--tp", "0"], "--tp 0: must be a positive number of GPUs"),
    (["--gpu-memory-utilization", "90"], "--gpu-memory-utilization 90.0: must be in (0, 1]"),
    (["--gpu-memory-utilization", "0"], "--gpu-memory-utilization 0.0: must be in (0, 1]"),
    (["--kv-blocks", "0"], "--kv-blocks 0: must be a positive number of blocks"),
])
def test_calibrate_refuses_a_bad_server_before_loading(flags, needle, tmp_path, capsys):
    # a data directory that does not exist: were the data read first, its error would show
    argv = ["calibrate", "linear", "--model-config", "config.json",
            "--data", str(tmp_path / "absent"), *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
