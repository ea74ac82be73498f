"""Verifier for ledger-recover: recomputes the clean ledger from a pristine copy and compares."""
import datetime as dt
import json
import os
import re
import sys
from decimal import Decimal

APP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))


def valid(line, accounts):
    parts = line.split(",")
    if len(parts) != 4:
        return False
    tx, acct, amount, date = parts
    if not re.fullmatch(r"T\d{4}", tx) or acct not in accounts or not re.fullmatch(r"-?\d+\.\d{2}", amount):
        return False
    try:
        dt.date.fromisoformat(date)
    except ValueError:
        return False
    return re.fullmatch(r"\d{4}-\d{2}-\d{2}", date) is not None


def main():
    raw = open(os.path.join(HERE, "ledger.csv"), "rb").read()
    assert open(os.path.join(APP, "ledger.csv"), "rb").read() == raw, "ledger.csv was modified"
    control = json.load(open(os.path.join(HERE, "control.json")))
    lines = raw.decode("utf-8", errors="surrogateescape").split("\n")[:-1]
    keep, rejected, seen = [lines[0]], [], set()
    for no, line in enumerate(lines[1:], start=2):
        if valid(line, control["accounts"]) and line.split(",")[0] not in seen:
            seen.add(line.split(",")[0])
            keep.append(line)
        else:
            rejected.append(no)
    got_clean = open(os.path.join(APP, "ledger.clean.csv"), "rb").read()
    want_clean = ("\n".join(keep) + "\n").encode()
    assert got_clean.rstrip(b"\n") == want_clean.rstrip(b"\n"), "ledger.clean.csv differs"
    got_rej = [int(x) for x in open(os.path.join(APP, "rejected.txt")).read().split()]
    assert got_rej == rejected, f"rejected.txt {got_rej} != {rejected}"
    sums = {}
    for line in keep[1:]:
        _, acct, amount, _ = line.split(",")
        sums[acct] = sums.get(acct, Decimal(0)) + Decimal(amount)
    want_bal = ["account,balance"] + [f"{a},{sums.get(a, Decimal(0)):.2f}" for a in sorted(control["accounts"])]
    assert [f"{a},{v}" for a, v in sorted(control["accounts"].items())] == want_bal[1:], "control mismatch (task bug)"
    got_bal = open(os.path.join(APP, "balances.csv")).read().split()
    assert got_bal == want_bal, f"balances.csv {got_bal} != {want_bal}"
    assert len(keep) - 1 == control["transactions"]
    print("all checks passed")


if __name__ == "__main__":
    main()
