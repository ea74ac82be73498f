"""Verifier for jsonl-schema-drift: report from the shipped events, and the script on unseen events."""
import datetime as dt
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from decimal import Decimal

APP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))


def reference(events_dir):
    days, seen = {}, set()
    for path in sorted(glob.glob(os.path.join(events_dir, "*.jsonl"))):
        for line in open(path):
            if not line.strip():
                continue
            ev = json.loads(line)
            if ev["type"] != "purchase" or ev["event_id"] in seen:
                continue
            seen.add(ev["event_id"])
            if "ts" in ev:
                when = dt.datetime.fromtimestamp(ev["ts"], dt.timezone.utc)
                amount = Decimal(ev["amount_cents"]) / 100
            else:
                when = dt.datetime.fromisoformat(ev["timestamp"].replace("Z", "+00:00")).astimezone(dt.timezone.utc)
                amount = Decimal(ev["amount"])
            day = when.date().isoformat()
            n, total = days.get(day, (0, Decimal(0)))
            days[day] = (n + 1, total + amount)
    lines = ["date,orders,revenue"] + [f"{d},{n},{t.quantize(Decimal('0.01'))}" for d, (n, t) in sorted(days.items())]
    return "\n".join(lines) + "\n"


def main():
    got = open(os.path.join(APP, "reports/daily_revenue.csv")).read()
    want = reference(os.path.join(HERE, "events"))
    assert got == want, f"report differs:\n{got}\n---want---\n{want}"
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(APP, "ingest.py"), tmp)
        shutil.copytree(os.path.join(HERE, "hidden"), os.path.join(tmp, "ev"))
        subprocess.run([sys.executable, "ingest.py", "ev", "r/out.csv"], cwd=tmp, check=True, timeout=30)
        got = open(os.path.join(tmp, "r/out.csv")).read()
        want = reference(os.path.join(tmp, "ev"))
        assert got == want, f"hidden report differs:\n{got}\n---want---\n{want}"
    print("all checks passed")


if __name__ == "__main__":
    main()
