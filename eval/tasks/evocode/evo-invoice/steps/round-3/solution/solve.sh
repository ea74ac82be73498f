#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}"
python3 - <<'PY'
src = open("invoice.py").read()
src = src.replace("[--rates RATES_JSON]", "[--rates RATES_JSON] [--discount PCT]")
old = src[src.index("def main(argv):"):src.index('if __name__ == "__main__":')]
new = '''def percent(text):
    try:
        pct = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not pct.is_finite() or not 0 <= pct <= 100:
        raise argparse.ArgumentTypeError("discount must be between 0 and 100")
    return pct


def main(argv):
    ap = argparse.ArgumentParser(prog="invoice.py")
    ap.add_argument("items")
    ap.add_argument("--rates")
    ap.add_argument("--discount", type=percent, default=Decimal(0))
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
    by_cat = {}
    for cat, a in items:
        by_cat[cat] = by_cat.get(cat, Decimal(0)) + a
    tax = sum((cents(a * rates.get(cat, Decimal(0))) for cat, a in by_cat.items()), Decimal(0))
    discount = cents(subtotal * args.discount / 100)
    print(f"subtotal={subtotal:.2f}\\ndiscount={discount:.2f}\\ntax={tax:.2f}\\ntotal={subtotal - discount + tax:.2f}")
    return 0


'''
open("invoice.py", "w").write(src.replace(old, new))
PY
