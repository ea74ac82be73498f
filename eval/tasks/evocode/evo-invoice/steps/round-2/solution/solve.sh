#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}"
python3 - <<'PY'
src = open("invoice.py").read()
src = src.replace('"""invoice: totals for a CSV of line items. usage: invoice.py ITEMS_CSV"""',
                  '"""invoice: totals for a CSV of line items. usage: invoice.py ITEMS_CSV [--rates RATES_JSON]"""')
src = src.replace("import csv\n", "import argparse\nimport csv\nimport json\n")
old = src[src.index("def main(argv):"):src.index('if __name__ == "__main__":')]
new = '''def main(argv):
    ap = argparse.ArgumentParser(prog="invoice.py")
    ap.add_argument("items")
    ap.add_argument("--rates")
    args = ap.parse_args(argv)
    rates = {}
    if args.rates:
        with open(args.rates) as f:
            rates = {k: Decimal(v) for k, v in json.load(f).items()}
    try:
        items = read_items(args.items)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 1
    subtotal = sum((a for _, a in items), Decimal(0))
    tax = sum((cents(a * rates.get(cat, Decimal(0))) for cat, a in items), Decimal(0))
    print(f"subtotal={subtotal:.2f}\\ntax={tax:.2f}\\ntotal={subtotal + tax:.2f}")
    return 0


'''
open("invoice.py", "w").write(src.replace(old, new))
PY
