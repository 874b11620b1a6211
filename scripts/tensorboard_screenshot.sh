#!/usr/bin/env bash
# The screenshot in docs/tracking.md: TensorBoard's scalars page for the demo run, as a browser shows it.
# A real `tensorboard` server on loopback reads the demo's logs; headless Chromium renders the page.
# Not part of `make test`. Needs the demo's output (`make demo`) and Chromium
# (Debian: apt-get install -y --no-install-recommends chromium).
#
#   scripts/tensorboard_screenshot.sh [LOGDIR] [PNG]     # defaults: demo-out/run docs/img/tensorboard-demo.png
# TAGS: the page's tag filter (a regular expression; default: a few SFT, RL and eval charts), "" for all.
set -euo pipefail
cd "$(dirname "$0")/.."

logdir=${1:-demo-out/run}
png=${2:-docs/img/tensorboard-demo.png}
venv=${VENV:-.venv}
tags=${TAGS-^(train/loss|reward/mean|tools/calls_per_rollout|eval/synthetic/agentic/accuracy)$}
browser=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
[ -d "$logdir" ] || { echo "no $logdir: run 'make demo' first (or give the run's directory)" >&2; exit 2; }
[ -n "$browser" ] || { echo "no Chromium: apt-get install -y --no-install-recommends chromium" >&2; exit 2; }

port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
profile=$(mktemp -d)
"$venv/bin/tensorboard" --logdir "$logdir" --host 127.0.0.1 --port "$port" >"$profile/tensorboard.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -rf "$profile"' EXIT

url="http://127.0.0.1:$port"
query=$("$venv/bin/python" -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$tags")
for _ in $(seq 120); do  # the server answers once it has started (its first load of the logs follows)
  if "$venv/bin/python" -c "import urllib.request; urllib.request.urlopen('$url/data/runs', timeout=2)" 2>/dev/null; then
    break
  fi
  kill -0 "$server" 2>/dev/null || { cat "$profile/tensorboard.log" >&2; exit 1; }
  sleep 0.5
done
sleep 3  # let it read every run's event files before the page asks for them

mkdir -p "$(dirname "$png")"
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile/chromium" --window-size=1400,1000 \
  --virtual-time-budget=15000 --screenshot="$png" "$url/#scalars&_smoothingWeight=0&tagFilter=$query"
echo "$png: TensorBoard's scalars page for $logdir"
