"""Issue 56: an endpoint that ignores ``max_tokens`` and sends 60 MB was stored whole (63 MB
in ``llm_calls``, the cassette and ``llm.html``) and printed whole by ``llm-check``. A
reply is kept up to ``llm.max_reply_bytes`` (64 KiB), cut there with the reason."""

from __future__ import annotations

import json

import pytest
from llm_server import HELDOUT_RUNS, Reply, fenced, llm_config, make_parent, program_for

from evolve.cli.main import main
from evolve.config.llm import LLMConfig
from evolve.operators.llm.endpoint import Exchange, cap_reply
from evolve.operators.llm.operator import build_llm_operator

BIG = 60 * 1024 * 1024
CAP = 64 * 1024


def _flood(request, n) -> Reply:
    return Reply(content=fenced(program_for(n)) + "x" * BIG, completion_tokens=10)


def test_a_60_mb_reply_is_stored_cut_at_the_cap_with_the_reason(serve, tmp_path):
    server = serve(_flood)
    cassette = tmp_path / "c.jsonl"
    op = build_llm_operator(llm_config(server, cassette=str(cassette), cassette_mode="record"),
                            heldout=HELDOUT_RUNS)
    import numpy as np

    (prop,) = op.propose([make_parent()], [], np.random.default_rng(1), 1)
    op.close()
    call = prop.llm_call
    assert len(call["reply"].encode()) == CAP  # what the archive's llm_calls row stores
    assert f"reply cut to {CAP} bytes of" in call["error"] and "llm.max_reply_bytes" in \
        call["error"]
    assert prop.source is not None and prop.error is None  # the program came first: kept
    assert cassette.stat().st_size < 2 * CAP  # the cassette too
    (line,) = cassette.read_text().splitlines()
    assert len(json.loads(line)["exchange"]["reply"].encode()) == CAP


def test_llm_check_prints_at_most_the_cap(serve, capsys):
    server = serve(_flood)
    assert main(["llm-check", "--llm", "test-model", "--llm-base-url", server.base_url]) == 0
    out = capsys.readouterr().out
    assert CAP < len(out) < CAP + 2000, len(out)
    assert main(["llm-check", "--llm", "test-model", "--llm-base-url", server.base_url,
                 "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["reply"].encode()) == CAP


def test_cap_is_a_config_key_and_cuts_at_a_character_boundary():
    ex = Exchange("ok", "é" * 40_000, "stop", 1, 1, 0.1, 1, None)  # 80,000 bytes
    cut = cap_reply(ex, 2048)
    assert len(cut.reply.encode()) == 2048 and cut.reply == "é" * 1024
    assert cut.error == "reply cut to 2048 bytes of 80000 bytes (llm.max_reply_bytes)"
    assert cap_reply(ex, 80_000) is ex
    assert LLMConfig().max_reply_bytes == CAP
    with pytest.raises(ValueError, match="max_reply_bytes must be >= 1024"):
        LLMConfig(max_reply_bytes=10)
