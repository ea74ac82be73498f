"""Verifier for csv-etl-quoting: checks the agent's outputs and reruns its etl.py on a hidden export."""
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

APP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))


def reference(src):
    recs, totals = [], {}
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            rec = {"order_id": int(row["order_id"]), "customer": row["customer"], "item": row["item"],
                   "qty": int(row["qty"]), "unit_price": float(row["unit_price"])}
            rec["total"] = round(rec["qty"] * rec["unit_price"], 2)
            recs.append(rec)
            totals[rec["customer"]] = totals.get(rec["customer"], 0.0) + rec["total"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for c in sorted(totals):
        w.writerow([c, f"{totals[c]:.2f}"])
    return recs, buf.getvalue()


def check(src, jsonl, tot):
    want_recs, want_tot = reference(src)
    with open(jsonl) as f:
        got = [json.loads(line) for line in f if line.strip()]
    assert got == want_recs, f"orders.jsonl differs:\n got {got}\nwant {want_recs}"
    for rec in got:
        assert isinstance(rec["order_id"], int) and isinstance(rec["qty"], int), rec
    got_rows = list(csv.reader(open(tot, newline="")))
    want_rows = list(csv.reader(io.StringIO(want_tot)))
    assert got_rows == want_rows, f"totals.csv differs: {got_rows} != {want_rows}"


def main():
    # 1. the outputs the agent was asked to produce from the shipped data (pristine copy kept here)
    check(os.path.join(HERE, "orders.csv"), os.path.join(APP, "out/orders.jsonl"), os.path.join(APP, "out/totals.csv"))
    # 2. the fixed script on an export it has never seen
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(APP, "etl.py"), tmp)
        shutil.copy(os.path.join(HERE, "hidden_orders.csv"), tmp)
        subprocess.run([sys.executable, "etl.py", "hidden_orders.csv", "o/a.jsonl", "o/t.csv"], cwd=tmp,
                       check=True, timeout=30)
        check(os.path.join(tmp, "hidden_orders.csv"), os.path.join(tmp, "o/a.jsonl"), os.path.join(tmp, "o/t.csv"))
    print("all checks passed")


if __name__ == "__main__":
    main()
