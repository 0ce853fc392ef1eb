"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests (no LLM behind it).

Why a real server and not a mock client: the operator's retry loop, timeouts, Retry-After
handling and connection-failure detection all live at the HTTP layer of the ``openai``
client; only real sockets exercise them. Each test gives the server a *responder*: a
function from (request JSON, call number) to a :class:`Reply` – a program in a fenced
block, garbage, a slow reply, a 429 with Retry-After, a 500, or a body that is not JSON.

Bounded by construction: the server stops itself after ``lifetime_s`` seconds, slow
replies sleep in short slices and give up when the server stops, and ``stop()`` may be
called at any time (mid-run) after which connections are refused.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from evaluator.features.glossary import FEATURE_NAMES


@dataclass
class Reply:
    """What the server answers to one request."""

    content: str | None = None
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int | None = None  # None: len(prompt text) // 4
    completion_tokens: int | None = None  # None: len(content) // 4
    usage: bool = True
    raw_body: str | None = None  # sent verbatim instead of a completion JSON
    finish_reason: str = "stop"


Responder = Callable[[dict[str, Any], int], Reply]


def fenced(source: str, prose: str = "Here is the improved program.") -> str:
    return f"{prose}\n\n```python\n{source.strip()}\n```\n"


def program_for(seed: int) -> str:
    """A valid program of the language that depends on ``seed`` (distinct per seed mostly)."""
    names = [n for n in FEATURE_NAMES if n not in ("is_moe", "tp", "layers")]
    a = names[seed % len(names)]
    b = names[(seed // len(names)) % len(names)]
    scale = 1.0 + (seed % 7)
    return (f'"""Overhead plus a scaled {a} and {b} (test server, seed {seed})."""\n'
            'CONSTANTS = {"base": (3000.0, 100.0, 50000.0), "ka": (%.1f, 0.0, 100.0),\n'
            '             "kb": (1.0, 0.0, 100.0)}\n\n'
            "def step_time(f, c):\n"
            f"    return c.base + c.ka * f.{a} + c.kb * f.{b} + f.weight_read\n") % scale


def good_responder(request: dict[str, Any], n: int) -> Reply:
    """A fenced program derived from the request's seed: deterministic per request."""
    return Reply(content=fenced(program_for(int(request.get("seed") or 0))))


def parent_source(request: dict[str, Any]) -> str:
    """The first python block of the user message (the parent, in a mutate prompt)."""
    user = request["messages"][-1]["content"]
    m = re.search(r"```python\n(.*?)```", user, re.DOTALL)
    return m.group(1) if m else ""


class LLMServer:
    """``POST /v1/chat/completions`` (and ``GET /v1/models``) on a random free port."""

    def __init__(self, responder: Responder = good_responder, lifetime_s: float = 60.0,
                 model: str = "test-model"):
        self.responder = responder
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str | None] = []  # each request's Authorization header
        self.paths: list[str] = []  # and its path with the query
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def start(self) -> LLMServer:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket (later connects are refused)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._timer.cancel()
        if threading.current_thread() is not self._thread:
            self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            n = len(self.requests)
            self.requests.append(request)
        return self.responder(request, n)

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False if the server was stopped meanwhile."""
        return not self._stopped.wait(seconds)


def _handler_for(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: a stop is seen at once

        def log_message(self, *args: Any) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [
                    {"id": server.model, "object": "model", "owned_by": "test"}]})
            else:
                self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            server.auth.append(self.headers.get("Authorization"))
            server.paths.append(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self.path.split("?")[0].rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            reply = server._next(body)
            if reply.delay_s and not server._wait(reply.delay_s):
                self.close_connection = True
                return
            if reply.raw_body is not None:
                self._send_raw(reply.status, reply.raw_body.encode(), reply.headers)
            elif reply.status != 200:
                self._send(reply.status, {"error": {"message": f"test error {reply.status}",
                                                    "type": "test"}}, reply.headers)
            else:
                self._send(200, _completion(server, body, reply), reply.headers)

        def _send(self, status: int, obj: dict[str, Any],
                  headers: dict[str, str] | None = None) -> None:
            self._send_raw(status, json.dumps(obj).encode(), headers or {})

        def _send_raw(self, status: int, data: bytes, headers: dict[str, str]) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (TimeoutError, BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout); nothing to do

    return Handler


def _completion(server: LLMServer, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
    prompt = "".join(m.get("content") or "" for m in request.get("messages", []))
    content = reply.content or ""
    out: dict[str, Any] = {
        "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion",
        "created": int(time.time()), "model": request.get("model", server.model),
        "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                     "message": {"role": "assistant", "content": reply.content}}],
    }
    if reply.usage:
        p = len(prompt) // 4 if reply.prompt_tokens is None else reply.prompt_tokens
        c = len(content) // 4 if reply.completion_tokens is None else reply.completion_tokens
        out["usage"] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
    return out


# ---- parents for operator tests ------------------------------------------------------------
TRAIN_RUNS = ("20260217-155451-llama-2-7b-tp1-codegen", "20260217-202857-llama-2-70b-tp4-general",
              "20260218-120914-mixtral-8x7b-v0-1-tp2-codegen",
              "20260218-150304-codellama-34b-tp2-general")
HELDOUT_RUNS = ("20260217-231439-llama-2-7b-tp1-general",
                "20260218-160939-codellama-34b-tp2-reasoning")

ROOFLINE = '''"""Roofline: the slower of compute and memory traffic, plus a per-step overhead."""
CONSTANTS = {"overhead": (3000.0, 0.0, 20000.0), "k_mem": (1.0, 0.1, 10.0),
             "k_cmp": (1.0, 0.1, 10.0)}

def step_time(f, c):
    compute = c.k_cmp * (f.pf_gemm + f.dc_gemm + f.pf_attn + f.dc_attn)
    memory = c.k_mem * (f.weight_read + f.kv_read + f.kv_write)
    return c.overhead + maximum(compute, memory) + f.tp_allreduce
'''

LINEAR = '''"""Additive: every component costs its own time, plus per-request overheads."""
CONSTANTS = {"base": (4000.0, 0.0, 20000.0), "per_req": (20.0, 0.0, 500.0),
             "k": (1.5, 0.5, 10.0)}

def step_time(f, c):
    work = f.pf_gemm + f.dc_gemm + f.pf_attn + f.dc_attn + f.weight_read + f.kv_read
    return c.base + c.per_req * f.batch_size + c.k * work
'''

WORST_BATCHES = "\n".join([
    "| run | stage | input bin | n | measured E2E s | simulated E2E s | error |",
    "|---|---|---|---|---|---|---|",
    "| 20260217-202857-llama-2-70b-tp4-general | 3 (8 rps) | 2k-4k | 112 | 18.40 | 11.95 "
    "| -35.1% |",
    "| 20260217-202857-llama-2-70b-tp4-general | 2 (4 rps) | 2k-4k | 96 | 9.12 | 7.01 | -23.1% |",
    "| 20260218-120914-mixtral-8x7b-v0-1-tp2-codegen | 3 (10 rps) | 512-1k | 140 | 6.02 | 7.33 "
    "| +21.8% |",
    "| 20260218-150304-codellama-34b-tp2-general | 1 (2 rps) | <512 | 80 | 3.10 | 3.61 | +16.5% |",
])


def train_errors(scale: float = 1.0) -> dict[str, dict[str, float]]:
    base = [(0.082, 0.31, 0.05), (0.21, 0.44, 0.12), (0.15, 0.09, 0.11), (0.04, 0.27, 0.03)]
    return {name: {"e2e_mean": e * scale, "ttft_mean": t * scale, "itl_mean": i * scale}
            for name, (e, t, i) in zip(TRAIN_RUNS, base, strict=True)}


def make_parent(source: str = ROOFLINE, loss: float = 0.2513, scale: float = 1.0,
                worst: str = WORST_BATCHES):
    """A Parent of a real, checked program with plausible training errors."""
    from evolve.operators.base import Parent
    from evolve.program.language import parse_program

    program = parse_program(source)
    consts = {"global": {c.name: c.init * 1.37 for c in program.constants}}
    return Parent(program=program, constants=consts, loss=loss,
                  train_errors=train_errors(scale), worst_batches=worst)


def llm_config(server: LLMServer | None, **kw: Any) -> Any:
    """An ``LLMConfig`` for ``server`` with test-sized timeouts and backoff (``kw`` wins);
    no server: a port where nothing listens."""
    from evolve.config.llm import LLMConfig

    base = {"model": "test-model",
            "base_url": server.base_url if server else "http://127.0.0.1:9/v1",
            "api_key_env": "EVOLVE_TEST_NO_SUCH_KEY", "timeout_s": 5.0, "retries": 2,
            "backoff_base_s": 0.01, "backoff_cap_s": 0.05, "concurrency": 3,
            "crossover_prob": 0.0}
    base.update(kw)
    return LLMConfig(**base)
