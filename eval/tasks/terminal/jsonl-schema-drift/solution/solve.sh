#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}"
python3 - <<'PY'
import re
src = open("ingest.py").read()
src = src.replace("import sys\n", "import sys\nfrom decimal import Decimal\n", 1)
old = '''                day = dt.datetime.fromtimestamp(ev["ts"], dt.timezone.utc).date().isoformat()
                orders, cents = days.get(day, (0, 0))
                days[day] = (orders + 1, cents + ev["amount_cents"])'''
new = '''                if "ts" in ev:  # producer < 2.0
                    when = dt.datetime.fromtimestamp(ev["ts"], dt.timezone.utc)
                    cents = int(ev["amount_cents"])
                else:  # producer >= 2.0
                    stamp = ev["timestamp"].replace("Z", "+00:00")
                    when = dt.datetime.fromisoformat(stamp).astimezone(dt.timezone.utc)
                    cents = int((Decimal(ev["amount"]) * 100).to_integral_value())
                day = when.date().isoformat()
                orders, total = days.get(day, (0, 0))
                days[day] = (orders + 1, total + cents)'''
assert old in src
open("ingest.py", "w").write(src.replace(old, new))
PY
python3 ingest.py events reports/daily_revenue.csv
