#!/usr/bin/env bash
# What the scale-out tests need (tests/scale): Debian's PostgreSQL server binaries (apt,
# only if no initdb is found; the tests start their own server in a temporary directory
# on a free loopback port, run as the `postgres` user when root), and the `ray` and
# `postgres` extras (Ray; psycopg 3) in the active virtualenv. Idempotent.
# Opting out on a machine without them: EVOLVE_SKIP_RAY=1 / EVOLVE_SKIP_POSTGRES=1 make
# those tests skip instead of fail (CI sets neither).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
python -m pip install --quiet -c scripts/constraints.txt -e '.[ray,postgres]'
ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1
python -c "import ray, psycopg; print('ray', ray.__version__, '/ psycopg', psycopg.__version__)"
