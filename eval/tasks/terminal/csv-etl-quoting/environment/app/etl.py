#!/usr/bin/env python3
"""Convert the orders CSV export to JSON Lines and write per-customer totals.

usage: etl.py ORDERS_CSV OUT_JSONL OUT_TOTALS_CSV
"""
import json
import os
import sys


def main(src, out_jsonl, out_totals):
    totals = {}
    os.makedirs(os.path.dirname(out_jsonl) or ".", exist_ok=True)
    os.makedirs(os.path.dirname(out_totals) or ".", exist_ok=True)
    with open(src) as f, open(out_jsonl, "w") as out:
        header = f.readline().strip().split(",")
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = dict(zip(header, line.split(",")))
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
    with open(out_totals, "w") as t:
        for customer in sorted(totals):
            t.write(f"{customer},{totals[customer]:.2f}\n")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
