"""Fixtures of the operator tests: real OpenAI-compatible servers on 127.0.0.1."""

from __future__ import annotations

import pytest
from llm_server import LLMServer, good_responder


@pytest.fixture
def serve():
    """Start servers with a given responder; every one is stopped after the test."""
    servers: list[LLMServer] = []

    def start(responder=good_responder, lifetime_s: float = 30.0) -> LLMServer:
        s = LLMServer(responder, lifetime_s=lifetime_s).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()
