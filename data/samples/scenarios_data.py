"""Hand-written scenarios about data: an ETL pipeline, a JSONL ledger, an access-log report, a SQLite database.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
CSV quoting lost by a normalizer, a torn and duplicated ledger, 5xx counts with awk, `.recover` of a malformed file.
"""

import json

from .scenario import Round, S, Scenario, bash, edit, read, write
from .synthetic_text import WORDS, big_log_lines, hexid, ls_la, pytest_log


def sc_csv_pipeline(rng, long=False):
    day = f"2024-{rng.randint(3, 9):02d}-{rng.randint(10, 28):02d}"
    n = rng.randint(15000, 24000)
    bad = sorted(rng.sample(range(200, n), 6))
    host = f"etl-worker-{rng.randint(1, 9):02d}"
    cwd = "/srv/pipeline"
    csvf = f"incoming/orders_{day}.csv"
    listing = ls_la(rng, [(".git", "d", 4096), ("Makefile", "f", 1874), ("README.md", "f", 2311),
                          ("etl", "d", 4096), ("incoming", "d", 4096), ("logs", "d", 4096),
                          ("staging", "d", 4096), ("tests", "d", 4096), ("warehouse.db", "f", rng.randint(8, 90) * 1048576)],
                    owner="etl", group="etl")
    log = "\n".join([
        f"[{day} 02:00:01] nightly: start run_id={hexid(rng, 12)}",
        f"[{day} 02:00:01] fetch: downloaded {csvf} ({n} lines, {n * 97 // 1024} KiB)",
        f"[{day} 02:00:03] normalize: wrote staging/orders_clean.csv",
        f"[{day} 02:00:04] load: reading staging/orders_clean.csv",
        "Traceback (most recent call last):",
        '  File "/srv/pipeline/etl/load_orders.py", line 58, in <module>',
        "    main(sys.argv[1:])",
        '  File "/srv/pipeline/etl/load_orders.py", line 41, in main',
        "    df = pd.read_csv(src, dtype=DTYPES, parse_dates=[\"order_date\"])",
        '  File "/srv/pipeline/.venv/lib/python3.11/site-packages/pandas/io/parsers/readers.py", line 1026, in read_csv',
        "    return _read(filepath_or_buffer, kwds)",
        '  File "/srv/pipeline/.venv/lib/python3.11/site-packages/pandas/io/parsers/readers.py", line 626, in _read',
        "    return parser.read(nrows)",
        '  File "/srv/pipeline/.venv/lib/python3.11/site-packages/pandas/io/parsers/c_parser_wrapper.py", line 234, in read',
        "    chunks = self._reader.read_low_memory(nrows)",
        '  File "parsers.pyx", line 838, in pandas._libs.parsers.TextReader.read_low_memory',
        '  File "parsers.pyx", line 905, in pandas._libs.parsers.TextReader._read_rows',
        '  File "parsers.pyx", line 2061, in pandas._libs.parsers.raise_parser_error',
        f"pandas.errors.ParserError: Error tokenizing data. C error: Expected 7 fields in line {bad[0] + 1}, saw 8",
        "",
        f"[{day} 02:00:05] nightly: FAILED (exit 1)"])
    companies = ["Smith, Jones & Co", "Acme Tools, Inc.", "Baker, Lowe and Partners", "Nordic Hydro, AB",
                 "Lee, Park & Kim LLC", "Fischer, Braun GmbH"]
    awk_out = "\n".join(f"{b + 1}: 8 fields" for b in bad)
    row = f'{bad[0]:06d},{day},C-{rng.randint(1000, 9999)},"{companies[0]}",{rng.randint(1, 40)},{rng.randint(300, 99999) / 100:.2f},EUR'
    bad_clean = row.replace('"', "")
    norm_src = '''"""Normalize the raw order export: trim fields, upper-case currency, fix dates."""
import csv
import sys
from datetime import datetime

HEADER = ["order_id", "order_date", "customer_id", "customer_name", "qty", "amount", "currency"]


def clean(row):
    row = [f.strip() for f in row]
    row[1] = datetime.strptime(row[1], "%Y-%m-%d").date().isoformat()
    row[6] = row[6].upper()
    return row


def main(src, dst):
    with open(src, newline="", encoding="utf-8") as fin, open(dst, "w", encoding="utf-8") as out:
        reader = csv.reader(fin)
        next(reader)
        out.write(",".join(HEADER) + "\\n")
        for row in reader:
            out.write(",".join(clean(row)) + "\\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
'''
    steps1 = [
        S("I'm in the pipeline checkout. I need to see what last night's run did before changing anything.",
          "List the repo and look at the tail of the nightly log to find the failing stage.",
          bash("ls -la && tail -n 25 logs/nightly.log", listing + "\n" + log)),
        S(f"The load stage fails: pandas expects 7 fields but line {bad[0] + 1} of staging/orders_clean.csv has 8. "
          "The raw file went through normalize first, so either the raw export or the normalizer introduced the extra field.",
          "Count fields per line in the staging file with awk and compare that line with the raw input.",
          bash(f"awk -F',' 'NF!=7 {{print FNR\": \"NF\" fields\"}}' staging/orders_clean.csv | head -20", awk_out),
          bash(f"sed -n '{bad[0] + 1}p' staging/orders_clean.csv; grep -n '^{bad[0]:06d},' {csvf}",
               f"{bad_clean}\n{bad[0] + 1}:{row}"),
          say=f"Line {bad[0] + 1} of the staging file has 8 fields. Let me check how many lines are affected and what the raw row looks like."),
        S("The raw export quotes the customer name (\"Smith, Jones & Co\"), but the staging copy lost the quotes, so the embedded comma "
          "becomes a field separator. The normalizer must be writing rows without CSV quoting.",
          "Read etl/normalize.py.",
          read("etl/normalize.py", norm_src)),
        S("Confirmed: normalize.py parses with csv.reader but writes with ','.join(), which drops the quoting. "
          "Switching the output side to csv.writer fixes every row with a comma in a field.",
          "Replace the manual join with csv.writer and re-run normalize on the raw file.",
          edit("etl/normalize.py",
               '        out.write(",".join(HEADER) + "\\n")\n        for row in reader:\n            out.write(",".join(clean(row)) + "\\n")',
               '        writer = csv.writer(out, lineterminator="\\n")\n        writer.writerow(HEADER)\n        for row in reader:\n            writer.writerow(clean(row))'),
          bash(f".venv/bin/python -m etl.normalize {csvf} staging/orders_clean.csv && "
               "python3 -c \"import csv,collections;print(collections.Counter(len(r) for r in csv.reader(open('staging/orders_clean.csv'))))\"",
               f"Counter({{7: {n}}})")),
        S("Every row now parses into 7 fields. Time to run the remaining pipeline stages.",
          "Run the nightly target for that date and check the loaded row count.",
          bash(f"make nightly DATE={day} 2>&1 | tail -n 12",
               "\n".join([f".venv/bin/python -m etl.fetch --date {day} --skip-existing",
                          f"fetch: {csvf} already present, skipping",
                          f".venv/bin/python -m etl.normalize {csvf} staging/orders_clean.csv",
                          ".venv/bin/python -m etl.load_orders staging/orders_clean.csv warehouse.db",
                          f"load: {n - 1} rows -> warehouse.orders (replaced partition {day})",
                          ".venv/bin/python -m etl.report --date " + day,
                          f"report: wrote reports/daily_{day}.html",
                          f"[{day} 09:14:22] nightly: OK"]), dur=8.0),
          bash(f"sqlite3 warehouse.db \"select count(*), round(sum(amount),2) from orders where order_date='{day}'\"",
               f"{n - 1}|{rng.randint(400000, 2000000)}.{rng.randint(10, 99)}")),
    ]
    test_src = '''import csv
from etl import normalize


def test_commas_inside_quoted_fields_survive(tmp_path):
    src = tmp_path / "raw.csv"
    dst = tmp_path / "clean.csv"
    src.write_text(
        "order_id,order_date,customer_id,customer_name,qty,amount,currency\\n"
        '000001,2024-05-01,C-1001,"Smith, Jones & Co",3,19.90,eur\\n'
    )
    normalize.main(str(src), str(dst))
    rows = list(csv.reader(dst.open()))
    assert rows[1][3] == "Smith, Jones & Co"
    assert all(len(r) == 7 for r in rows)
'''
    steps2 = [
        S("The user wants a regression test for this bug.", "Add tests/test_normalize.py with a quoted-comma row and run the suite.",
          write("tests/test_normalize.py", test_src),
          bash(".venv/bin/python -m pytest -q tests", pytest_log(rng, cwd, [("tests/test_fetch.py", 4), ("tests/test_load.py", 6), ("tests/test_normalize.py", 1), ("tests/test_report.py", 3)], {}), dur=5.0)),
    ]
    return Scenario("csv-pipeline", "Repair the nightly orders pipeline", host, cwd, [
        Round(f"The nightly ETL job in /srv/pipeline failed for {day}. Find out why, fix it, and re-run the pipeline for that date so the warehouse has the orders.",
              steps1, f"The load stage crashed because etl/normalize.py wrote rows with ','.join(), which dropped the quoting around customer names that contain commas (e.g. \"{companies[0]}\"); those rows got 8 fields instead of 7. I switched the writer to csv.writer, re-normalized {csvf} (all {n} lines now have 7 fields) and re-ran `make nightly DATE={day}`: {n - 1} rows were loaded into warehouse.orders and the daily report was written."),
        Round("Thanks. Can you also add a regression test for the quoted-comma case?", steps2,
              "Added tests/test_normalize.py, which normalizes a row whose customer name contains a comma and checks that it survives with 7 fields. The full test suite passes."),
    ], "single", "etl/normalize.py")


def sc_ledger(rng, long=False):
    n = rng.randint(40000, 90000)
    host = f"ledger-{rng.choice(WORDS)}"
    cwd = "/var/lib/ledger"
    snap = rng.randint(n - 900, n - 300)
    listing = ls_la(rng, [("archive", "d", 4096), ("ledger.jsonl", "f", n * 161), ("ledger.lock", "f", 0),
                          (f"snapshot-{snap}.json", "f", 2210), ("wal", "d", 4096)], owner="svc-ledger", group="svc-ledger")
    tail = "\n".join(
        json.dumps({"seq": n - 3 + i, "ts": f"2024-06-0{rng.randint(1, 9)}T1{rng.randint(0, 9)}:{rng.randint(10, 59)}:{rng.randint(10, 59)}Z",
                    "account": f"ACC-{rng.randint(100, 999)}", "delta": round(rng.uniform(-500, 500), 2),
                    "ref": hexid(rng, 10)}) for i in range(3))
    cut = tail + '\n{"seq": ' + str(n) + ', "ts": "2024-06-09T11:58:0'
    dupes = sorted(rng.sample(range(snap - 400, snap), 3))
    find_bad = "\n".join([f"line {n + 1}: JSONDecodeError: Unterminated string starting at: line 1 column 23 (char 22)",
                          f"line {rng.randint(1000, n // 2)}: JSONDecodeError: Expecting value: line 1 column 1 (char 0)  (NUL bytes: 184)"] +
                         [f"duplicate seq {d} at lines {d + 1} and {d + 2}" for d in dupes] +
                         [f"checked {n + 1} lines, 2 unparsable, 3 duplicate seq, max seq {n - 1}"])
    rec_py = '''#!/usr/bin/env python3
"""Rebuild ledger.jsonl: drop unparsable lines, keep the first copy of each seq."""
import json
import sys

src, dst = sys.argv[1], sys.argv[2]
seen, kept, dropped = set(), 0, 0
with open(src, "rb") as fin, open(dst, "w", encoding="utf-8") as out:
    for raw in fin:
        line = raw.replace(b"\\x00", b"").strip()
        if not line:
            dropped += 1
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        if rec["seq"] in seen:
            dropped += 1
            continue
        seen.add(rec["seq"])
        out.write(json.dumps(rec, separators=(",", ":")) + "\\n")
        kept += 1
print(f"kept={kept} dropped={dropped} max_seq={max(seen)}")
'''
    bal = rng.randint(100000, 900000)
    steps = [
        S("I need to look at the ledger directory and the end of the file, since a power loss usually leaves a torn last write.",
          "List the directory, then show the last bytes of ledger.jsonl.",
          bash("ls -la && tail -c 600 ledger.jsonl", listing + "\n" + cut)),
        S("The last record is truncated mid-string. There may be other damage too (NUL-filled blocks, duplicated writes from a replayed WAL).",
          "Scan the whole file with a short Python pass that reports unparsable lines and duplicate seq numbers.",
          bash("python3 - <<'EOF'\nimport json\nseen = {}\nbad = 0\nfor i, raw in enumerate(open('ledger.jsonl','rb'), 1):\n    try:\n        r = json.loads(raw.replace(b'\\x00', b'') or b'x')\n    except Exception as e:\n        bad += 1\n        print(f'line {i}: {type(e).__name__}: {e}' + (f'  (NUL bytes: {raw.count(0)})' if 0 in raw else ''))\n        continue\n    if r['seq'] in seen:\n        print(f\"duplicate seq {r['seq']} at lines {seen[r['seq']]} and {i}\")\n    seen.setdefault(r['seq'], i)\nprint(f'checked {i} lines, {bad} unparsable, ... max seq {max(seen)}')\nEOF",
               find_bad, dur=3.0)),
        S("Two unparsable lines and three duplicated sequence numbers. The snapshot file records the balance as of a known seq, "
          "so I can check the repaired ledger against it.",
          "Look at the snapshot, back up the original, then write a recovery script.",
          bash(f"cat snapshot-{snap}.json | python3 -m json.tool | head -20",
               json.dumps({"seq": snap, "taken_at": "2024-06-09T04:00:00Z", "accounts": 412, "total_balance": bal,
                           "sha256_upto_seq": hexid(rng, 64)}, indent=4)),
          bash("cp -a ledger.jsonl archive/ledger.jsonl.corrupt-$(date +%Y%m%d) && ls -la archive | tail -3",
               "\n".join(ls_la(rng, [(f"ledger.jsonl.corrupt-20240609", "f", n * 161)], owner="svc-ledger", group="svc-ledger").splitlines()[-3:]))),
        S("Backup is in place. Now the recovery script.", "Write recover.py and run it into a new file.",
          write("/usr/local/sbin/ledger-recover.py", rec_py),
          bash("python3 /usr/local/sbin/ledger-recover.py ledger.jsonl ledger.recovered.jsonl", f"kept={n - 4} dropped=5 max_seq={n - 1}", dur=4.0)),
        S("One seq is missing (the NUL-filled line was a real record). Check whether the WAL still has it before recomputing balances.",
          "grep the wal segments for the gap and recompute the balance up to the snapshot seq.",
          bash("python3 -c \"import json;s=[json.loads(l)['seq'] for l in open('ledger.recovered.jsonl')];print(sorted(set(range(s[0],s[-1]+1))-set(s)))\"",
               f"[{n // 3}]"),
          bash(f"grep -h '\"seq\": {n // 3},' wal/*.seg | head -1 >> ledger.recovered.jsonl && sort -t: -k2 -n -s ledger.recovered.jsonl -o ledger.recovered.jsonl; "
               f"python3 -c \"import json;print(round(sum(json.loads(l)['delta'] for l in open('ledger.recovered.jsonl') if json.loads(l)['seq']<={snap}),2))\"",
               f"{bal}")),
        S("The recovered ledger's balance up to the snapshot seq matches the snapshot exactly. Swap it in atomically and fix ownership.",
          "mv into place, chown, and restart the ledger service.",
          bash("chown svc-ledger:svc-ledger ledger.recovered.jsonl && mv ledger.recovered.jsonl ledger.jsonl && systemctl restart ledgerd && systemctl is-active ledgerd && tail -c 200 ledger.jsonl",
               "active\n" + tail.splitlines()[-1].replace(": ", ":").replace(", ", ","))),
    ]
    return Scenario("ledger-recovery", "Recover a corrupted JSONL ledger", host, cwd, [
        Round("ledgerd refuses to start after last night's power cut: it says /var/lib/ledger/ledger.jsonl is corrupt. Recover as much of the ledger as possible without losing committed records, and get the service running again.",
              steps, f"The ledger had a torn final record, one NUL-filled line and three duplicated seq numbers from a WAL replay. I backed up the original to archive/, rebuilt the file with a script (/usr/local/sbin/ledger-recover.py) that drops unparsable lines and keeps the first copy of each seq, restored the one missing record ({n // 3}) from the WAL, and checked that the balance up to seq {snap} equals the snapshot ({bal}). The repaired ledger is in place and ledgerd is active again. Only the torn last record (seq {n}) is lost: it was never fully written."),
    ], "single", "")


def sc_accesslog(rng, long=False):
    host = f"lb-{rng.randint(1, 4)}"
    n = rng.randint(180000, 450000)
    ips = [f"{rng.randint(10, 200)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}" for _ in range(12)]
    paths = ["/api/v1/orders", "/api/v1/search", "/login", "/static/app.js", "/api/v1/cart", "/healthz"]

    def line(r, i):
        ip = r.choice(ips)
        st = r.choice([200] * 12 + [301, 304, 404, 500, 502, 503])
        return (f'{ip} - - [12/Jun/2024:{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d} +0000] '
                f'"{r.choice(["GET", "GET", "POST"])} {r.choice(paths)} HTTP/1.1" {st} {r.randint(120, 90000)} "-" "Mozilla/5.0"')
    head = big_log_lines(rng, 8, line)
    top = sorted(((rng.randint(200, 3000), ip) for ip in ips[:10]), reverse=True)
    top_txt = "\n".join(f"{c:>7} {ip}" for c, ip in top)
    hours = "\n".join(f"{h:02d} {rng.randint(6000, 20000)} {rng.randint(20, 900)} {rng.uniform(0.2, 6.0):.2f}%" for h in range(24))
    report = "# 5xx report for access.log (2024-06-12)\n\n## Top 10 client IPs by 5xx responses\n" + top_txt + "\n\n## Hourly error rate (hour total 5xx pct)\n" + hours + "\n"
    steps = [
        S("Look at the log format and size first.", "head and wc.",
          bash("head -n 8 /var/log/nginx/access.log && wc -l /var/log/nginx/access.log", head + f"\n{n} /var/log/nginx/access.log")),
        S("Combined log format: status is field 9, IP field 1, hour is the second ':'-separated part of field 4.",
          "Count 5xx per IP with awk.",
          bash("awk '$9 ~ /^5/ {c[$1]++} END {for (ip in c) printf \"%7d %s\\n\", c[ip], ip}' /var/log/nginx/access.log | sort -rn | head -10", top_txt, dur=3.0)),
        S("Now the hourly rate: total and 5xx per hour.", "awk splitting $4 on ':'.",
          bash("awk '{split($4,t,\":\"); h=t[2]; tot[h]++; if ($9 ~ /^5/) e[h]++} END {for (h in tot) printf \"%s %d %d %.2f%%\\n\", h, tot[h], e[h], 100*e[h]/tot[h]}' /var/log/nginx/access.log | sort", hours, dur=3.0)),
        S("Both tables look right. Write them into the report file the task asked for.", "Write /root/report.txt and show it.",
          write("/root/report.txt", report), bash("wc -l /root/report.txt && head -5 /root/report.txt", f"{report.count(chr(10))} /root/report.txt\n" + "\n".join(report.splitlines()[:5]))),
    ]
    return Scenario("awk-log-report", "Summarise 5xx errors from an access log", host, "/root", [
        Round("Using /var/log/nginx/access.log, write /root/report.txt with (1) the top 10 client IPs by number of 5xx responses and (2) the error rate per hour of day.",
              steps, f"I wrote /root/report.txt. It lists the top 10 client IPs by 5xx count ({top[0][1]} leads with {top[0][0]}) and, for each of the 24 hours, the total requests, the 5xx count and the error rate. The numbers come from two awk passes over the {n}-line log (status = field 9, hour taken from field 4)."),
    ], "single", "")


def sc_sqlite(rng, long=False):
    host = f"edge-{rng.randint(1, 50)}"
    rows = {t: rng.randint(1000, 90000) for t in ["devices", "readings", "alerts", "users"]}
    steps = [
        S("Check what sqlite says about the database.", "Run integrity_check (limited) and list the files.",
          bash("ls -la /var/lib/telemetry && sqlite3 /var/lib/telemetry/tele.db 'PRAGMA integrity_check;' | head",
               ls_la(rng, [("tele.db", "f", rng.randint(50, 400) * 1048576), ("tele.db-wal", "f", 0), ("tele.db-shm", "f", 32768)], owner="telemetry", group="telemetry") +
               f"\n*** in database main ***\nPage {rng.randint(1000, 9000)}: btree page has invalid cell content offset\nOn tree page {rng.randint(100, 999)} cell 17: 2nd reference to page {rng.randint(1000, 9000)}\nrow {rng.randint(1000, 50000)} missing from index idx_readings_ts\nwrong # of entries in index idx_readings_ts", dur=5.0)),
        S("The B-tree is damaged. Stop the service so nothing writes, keep a copy, then use the CLI's .recover to salvage rows into a new file.",
          "Stop telemetryd, copy the db, run .recover.",
          bash("systemctl stop telemetryd && cp -a /var/lib/telemetry/tele.db /root/tele.db.bad && sqlite3 /var/lib/telemetry/tele.db '.recover' | sqlite3 /root/tele.recovered.db && sqlite3 /root/tele.recovered.db 'PRAGMA integrity_check;'", "ok", dur=20.0)),
        S("The recovered file is consistent. Compare row counts with the original where it can still be read.", "Count rows per table in both.",
          bash("for t in devices readings alerts users; do printf '%-9s %8s %8s\\n' $t $(sqlite3 /root/tele.db.bad \"select count(*) from $t\" 2>/dev/null || echo ERR) $(sqlite3 /root/tele.recovered.db \"select count(*) from $t\"); done; sqlite3 /root/tele.recovered.db 'select count(*) from lost_and_found' 2>&1",
               "\n".join(f"{t:<9} {('ERR' if t == 'readings' else str(c)):>8} {c - (rng.randint(3, 40) if t == 'readings' else 0):>8}" for t, c in rows.items()) + "\nError: in prepare, no such table: lost_and_found")),
        S("Only a handful of readings rows were unrecoverable and there is no lost_and_found table. Install the recovered file with the right owner and start the service.",
          "Move into place, chown, start, check.",
          bash("install -o telemetry -g telemetry -m 640 /root/tele.recovered.db /var/lib/telemetry/tele.db && rm -f /var/lib/telemetry/tele.db-wal /var/lib/telemetry/tele.db-shm && systemctl start telemetryd && systemctl is-active telemetryd", "active", dur=3.0)),
    ]
    return Scenario("sqlite-recover", "Recover a malformed SQLite database", host, "/root", [
        Round("telemetryd logs 'database disk image is malformed' for /var/lib/telemetry/tele.db. Recover the data and get the service back.", steps,
              "PRAGMA integrity_check showed a damaged B-tree page and an inconsistent index. I stopped telemetryd, kept a copy of the broken file in /root/tele.db.bad, and rebuilt the database with `sqlite3 .recover` into a new file, which passes integrity_check. devices, alerts and users kept all their rows; readings lost a few dozen rows that sat on the damaged page. The recovered file is installed with the original owner and mode, and telemetryd is active."),
    ], "single", "")
