#!/bin/bash
# Round 3 verifier: cumulative cases (tests/cases.py is the task-level tests/ dir, which Harbor uploads
# to /tests before this step's own tests/). Prints CASE_SUMMARY; writes 1/0 to reward.txt.
HERE="$(cd "$(dirname "$0")" && pwd)"
LOGS="${LOGS_DIR:-/logs}"
mkdir -p "$LOGS/verifier"
python3 "$HERE/cases.py" --round 3 --app "${APP_DIR:-/app}" --reward "$LOGS/verifier/reward.txt"
if [ ! -s "$LOGS/verifier/reward.txt" ]; then
  echo "CASE_SUMMARY total_cases=0 success_count=0"
  echo 0 > "$LOGS/verifier/reward.txt"
fi
