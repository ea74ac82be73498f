#!/bin/bash
set -euo pipefail
APP="${APP_DIR:-/app}"
cd "$APP"
cat > etl.py <<'PY'
#!/usr/bin/env python3
"""Convert the orders CSV export to JSON Lines and write per-customer totals.

usage: etl.py ORDERS_CSV OUT_JSONL OUT_TOTALS_CSV
"""
import csv
import json
import os
import sys


def main(src, out_jsonl, out_totals):
    totals = {}
    os.makedirs(os.path.dirname(out_jsonl) or ".", exist_ok=True)
    os.makedirs(os.path.dirname(out_totals) or ".", exist_ok=True)
    with open(src, newline="") as f, open(out_jsonl, "w") as out:
        for row in csv.DictReader(f):
            rec = {
                "order_id": int(row["order_id"]),
                "customer": row["customer"],
                "item": row["item"],
                "qty": int(row["qty"]),
                "unit_price": float(row["unit_price"]),
            }
            rec["total"] = round(rec["qty"] * rec["unit_price"], 2)
            out.write(json.dumps(rec) + "\n")
            totals[rec["customer"]] = totals.get(rec["customer"], 0.0) + rec["total"]
    with open(out_totals, "w", newline="") as t:
        w = csv.writer(t, lineterminator="\n")
        for customer in sorted(totals):
            w.writerow([customer, f"{totals[customer]:.2f}"])


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
PY
python3 etl.py data/orders.csv out/orders.jsonl out/totals.csv
