#!/usr/bin/env bash
# Start/stop the throwaway S3 server (Ceph RADOS Gateway on 127.0.0.1) used by tests and the demo.
#   eval "$(scripts/s3server.sh start [DIR])"   # exports AWS_* and PARAVT_S3_* for this shell
#   scripts/s3server.sh stop [DIR]              # kills the daemons, deletes DIR
# DIR defaults to build/s3server. pytest reuses a server announced through PARAVT_S3_* (tests/fixtures/s3.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
cmd=${1:?usage: $0 start|stop [DIR]}
dir=${2:-build/s3server}
case "$cmd" in
  start) mkdir -p "$(dirname "$dir")"; exec "$PY" -m tests.support.s3server start --dir "$(realpath -m "$dir")" ;;
  stop) exec "$PY" -m tests.support.s3server stop --dir "$(realpath -m "$dir")" ;;
  *) echo "usage: $0 start|stop [DIR]" >&2; exit 2 ;;
esac
