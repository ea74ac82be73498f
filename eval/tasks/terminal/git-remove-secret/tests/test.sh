#!/bin/bash
# Verifier: writes 1 or 0 to $LOGS_DIR/verifier/reward.txt (Harbor: /logs/verifier/reward.txt).
APP="${APP_DIR:-/app}"
LOGS="${LOGS_DIR:-/logs}"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$LOGS/verifier"
if python3 "$HERE/test_outputs.py" "$APP"; then
  echo 1 > "$LOGS/verifier/reward.txt"
else
  echo 0 > "$LOGS/verifier/reward.txt"
fi
