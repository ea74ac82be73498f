#!/usr/bin/env python3
"""Daily revenue report from producer event logs.

usage: ingest.py EVENTS_DIR OUT_CSV
"""
import datetime as dt
import glob
import json
import os
import sys


def main(events_dir, out_csv):
    days = {}
    seen = set()
    for path in sorted(glob.glob(os.path.join(events_dir, "*.jsonl"))):
        with open(path) as f:
            for line in f:
                if not line.strip():
                    continue
                ev = json.loads(line)
                if ev["type"] != "purchase" or ev["event_id"] in seen:
                    continue
                seen.add(ev["event_id"])
                day = dt.datetime.fromtimestamp(ev["ts"], dt.timezone.utc).date().isoformat()
                orders, cents = days.get(day, (0, 0))
                days[day] = (orders + 1, cents + ev["amount_cents"])
    os.makedirs(os.path.dirname(out_csv) or ".", exist_ok=True)
    with open(out_csv, "w") as out:
        out.write("date,orders,revenue\n")
        for day in sorted(days):
            orders, cents = days[day]
            out.write(f"{day},{orders},{cents // 100}.{cents % 100:02d}\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(*sys.argv[1:])
