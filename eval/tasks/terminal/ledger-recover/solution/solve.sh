#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}"
# valid accounts from control.json
ACCTS=$(python3 -c 'import json; print(" ".join(json.load(open("control.json"))["accounts"]))')
awk -v accts="$ACCTS" -v rej=rejected.txt -v clean=ledger.clean.csv '
BEGIN { FS = ","; n = split(accts, a, " "); for (i = 1; i <= n; i++) ok[a[i]] = 1
        split("31 29 31 30 31 30 31 31 30 31 30 31", mdays, " ") }
NR == 1 { print > clean; next }
{
  good = (NF == 4 && $1 ~ /^T[0-9][0-9][0-9][0-9]$/ && ($2 in ok) && $3 ~ /^-?[0-9]+\.[0-9][0-9]$/ \
          && $4 ~ /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]$/)
  if (good) {
    y = substr($4, 1, 4) + 0; m = substr($4, 6, 2) + 0; d = substr($4, 9, 2) + 0
    leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
    max = (m == 2 && !leap) ? 28 : mdays[m]
    good = (m >= 1 && m <= 12 && d >= 1 && d <= max)
  }
  if (good && !($1 in seen)) { seen[$1] = 1; print > clean } else print NR > rej
}' ledger.csv
python3 - <<'PY'
from decimal import Decimal
import json
accts = json.load(open("control.json"))["accounts"]
sums = {a: Decimal(0) for a in accts}
for line in open("ledger.clean.csv").read().splitlines()[1:]:
    _, a, amt, _ = line.split(",")
    sums[a] += Decimal(amt)
with open("balances.csv", "w") as f:
    f.write("account,balance\n")
    for a in sorted(sums):
        f.write(f"{a},{sums[a]:.2f}\n")
    assert all(f"{sums[a]:.2f}" == v for a, v in accts.items()), "balances do not match control.json"
PY
