"""The columns two archives may differ in and still be the same archive.

Why a module: what counts as "the same archive" (the determinism digest,
``Archive.comparable``) is a decision of its own, read by the store and the digest.
"""

from __future__ import annotations

from typing import Any

# Informational columns: wall clock, code version, and how an LLM reply was obtained (from
# the endpoint or a cassette, at what cost). Never read by any decision, and left out when
# two archives are compared for determinism: a run recorded against an endpoint and its
# replay from the cassette decide everything alike.
INFORMATIONAL: dict[str, frozenset[str]] = {
    "runs": frozenset({"created_at", "finished_at", "code_version"}),
    "llm_calls": frozenset({"latency_s", "cached", "cost_usd"}),
}
# The same for keys of the stored run config: where the replies came from and how the
# transport retried or bounded them (the reply cap: no program comes near it); the model,
# sampling, prompts and budgets stay compared. And where the
# data and seed files were read from: a path names a place on one machine, not what was
# read; what was read is in the archive itself (the seeds' programs, content-hashed, and
# the corpora simulated from the data, `corpus_versions`), so the same search over the same
# files compares equal wherever they live, and different files still differ.
INFORMATIONAL_CONFIG: dict[str, frozenset[str]] = {
    "run": frozenset({"data", "seeds_dir"}),
    "llm": frozenset({"base_url", "api_key_env", "timeout_s", "retries", "backoff_base_s",
                      "backoff_cap_s", "concurrency", "cassette", "cassette_mode",
                      "max_reply_bytes"}),
}


def comparable_config(config: Any) -> Any:
    """A stored run config without its :data:`INFORMATIONAL_CONFIG` keys."""
    if not isinstance(config, dict):
        return config
    out = dict(config)
    for section, keys in INFORMATIONAL_CONFIG.items():
        if isinstance(out.get(section), dict):
            out[section] = {k: v for k, v in out[section].items() if k not in keys}
    return out
