#!/bin/bash
set -euo pipefail
cat > "${APP_DIR:-/app}/invoice.py" <<'PY'
#!/usr/bin/env python3
"""invoice: totals for a CSV of line items. usage: invoice.py ITEMS_CSV"""
import csv
import sys
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

CENT = Decimal("0.01")


def cents(x):
    return x.quantize(CENT, rounding=ROUND_HALF_UP)


def read_items(path):
    items = []
    with open(path, newline="") as f:
        for lineno, row in enumerate(csv.DictReader(f), start=2):
            try:
                qty = int(row["qty"])
                price = Decimal(row["unit_price"])
                if qty <= 0 or not price.is_finite() or price < 0:
                    raise ValueError
            except (ValueError, InvalidOperation, TypeError):
                raise SystemExit(f"error: line {lineno}: bad qty or unit_price") from None
            items.append((row["category"], cents(qty * price)))
    return items


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        items = read_items(argv[0])
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 1
    subtotal = sum((a for _, a in items), Decimal(0))
    print(f"subtotal={subtotal:.2f}\ntotal={subtotal:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
