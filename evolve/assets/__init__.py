"""Seed programs and prompt templates: where they are in a checkout and in an installed wheel.

Why: users read and add seed programs (``seeds/``) and prompt templates (``prompts/``) at
the repository's top level, where the project's design names them; a wheel ships copies in
this package (``setup.py``'s ``build_py``), read through :mod:`importlib.resources`. A
checkout (or an editable install) has no shipped copy and reads the top-level folders.
A leaf: imports nothing of ours.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

ASSETS = ("seeds", "prompts")


def asset_dir(name: str) -> Path:
    """The folder of ``name`` (``seeds`` or ``prompts``): the wheel's copy, else the checkout's."""
    if name not in ASSETS:
        raise ValueError(f"unknown asset folder {name!r}")
    shipped = resources.files(__name__) / name
    if shipped.is_dir():
        return Path(str(shipped))
    return Path(__file__).resolve().parents[2] / name
