"""A non-editable install runs: the wheel carries the seeds and prompts and ``evolve run`` works.

Builds the wheel with ``pip wheel``, installs it (no dependencies) into a fresh virtual
environment whose dependencies come from this one's site-packages (a ``.pth`` line, so no
network and no editable hook), and runs one generation from a folder outside the checkout.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hardening_helpers import tiny_toml

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    assert out.returncode == 0, " ".join(cmd) + "\n" + out.stdout[-3000:] + out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
          "-w", str(tmp / "dist"), str(ROOT)])
    (wheel,) = (tmp / "dist").glob("evolve_stepml-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
                     ).stdout.strip())
    (site / "deps_from_dev_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q",
          str(wheel)])
    return venv


def test_the_wheel_ships_seeds_and_prompts(installed):
    code = ("import evolve, evolve.assets as a; print(evolve.__file__); "
            "print(sorted(p.name for p in a.asset_dir('seeds').glob('*.py'))); "
            "print(sorted(p.name for p in a.asset_dir('prompts').glob('*.jinja')))")
    out = _run([str(installed / "bin" / "python"), "-c", code], cwd=installed).stdout.split("\n")
    assert str(installed) in out[0]  # the installed copy, not the checkout
    assert "'kernels.py'" in out[1] and "'layered.py'" in out[1]
    assert "'mutate.jinja'" in out[2]


def test_an_installed_evolve_runs_a_generation(installed, tmp_path, data_path):
    """``evolve run --generations 1 --seed 7`` on the hardening tests' tiny configuration
    (three runs cut to 20 s, small budgets): the install is under test, not the search."""
    env = {**os.environ, "EVOLVE_DATA": str(data_path.resolve())}
    toml = tiny_toml(tmp_path / "tiny.toml", generations=1)
    _run([str(installed / "bin" / "evolve"), "run", "--generations", "1", "--seed", "7",
          "--config", str(toml), "--archive", str(tmp_path / "a.db")], cwd=tmp_path, env=env)
    runs = _run([str(installed / "bin" / "evolve"), "frontier", "--archive",
                 str(tmp_path / "a.db"), "--json"], cwd=tmp_path, env=env).stdout
    assert '"id"' in runs
