"""The run configuration as documented TOML (``evolve run --print-config``).

Why a module of its own: rendering is presentation, the schema and its checks live in
:mod:`evolve.config.schema`; a user's edited copy of this output is a valid ``--config``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from evolve.config.schema import Config


def _toml_value(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        parts = [_toml_value(v) for v in value]
        kept = [p for p in parts if p is not None]
        return None if len(kept) < len(parts) else "[" + ", ".join(kept) + "]"
    if isinstance(value, dict):
        items = [f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in sorted(value.items())]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    return None


def to_toml(cfg: Config) -> str:
    """The configuration as TOML, each key preceded by its one-line documentation."""
    out = ["# evolve run configuration. Every key is optional; shown with its current value."]
    for sec in dataclasses.fields(cfg):
        section = getattr(cfg, sec.name)
        out += ["", f"[{sec.name}]"]
        if section.__doc__:
            out.append(f"# {section.__doc__.strip().splitlines()[0]}")
        for f in dataclasses.fields(section):
            if doc := f.metadata.get("doc", ""):
                out.append(f"# {doc}")
            rendered = _toml_value(getattr(section, f.name))
            out.append(f"{f.name} = {rendered}" if rendered is not None else
                       f"# {f.name} = (unset)")
    return "\n".join(out) + "\n"
