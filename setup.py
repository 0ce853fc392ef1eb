"""Ship the top-level ``seeds/`` and ``prompts/`` inside the wheel, as ``evolve/assets/*``.

Everything else about the build is in pyproject.toml; this only extends ``build_py`` so a
non-editable install (``pip install .``, a wheel) carries the seed programs and prompt
templates that :func:`evolve.assets.asset_dir` reads through ``importlib.resources``.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithAssets(build_py):
    def run(self) -> None:
        super().run()
        for name in ("seeds", "prompts"):
            target = Path(self.build_lib) / "evolve" / "assets" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(HERE / name, target,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithAssets})
