"""Canonical JSON: the same value always gives the same bytes.

Why a leaf module: both the run configuration (stored with each run) and the archive's
JSON columns must serialise identically, or two equal runs would differ byte for byte;
the archive must not depend on the configuration module to get it.
"""

from __future__ import annotations

import json
from typing import Any


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, compact, floats as repr (round-trip exact)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True,
                      default=_json_default)


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
