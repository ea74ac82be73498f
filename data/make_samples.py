#!/usr/bin/env python3
"""Generate the sample corpora under data/ (stdlib only, deterministic).

    python data/make_samples.py          # writes every file listed in data/README.md
    python data/check_samples.py         # validates them

Every scenario below is a hand-written terminal task (repair a pipeline, recover a
ledger, debug a systemd unit, fix a build, git surgery, ...).  A scenario is a list of
steps; each step has the agent's analysis/plan and one or more tool calls with their
(synthetic but realistic) outputs.  The same scenario is rendered four ways:

* Claude-Code style OpenAI tool calling   -> data/sft/agent_tool_calls.jsonl
* Terminus-2 JSON chat                    -> data/sft/terminus2_chat.jsonl
* Terminus pivot rows (NeMo Gym judge)    -> data/pivot/terminal_pivot.jsonl
* Harbor job directory with ATIF files    -> data/harbor/sample-job/

and three more in the shapes of public agent SFT sets (same scenarios, fewer records):

* OpenThoughts-Agent / Terminus-2 rows    -> data/sft/terminus2_conversations.jsonl
* ShareGPT tool calling (LLaMA-Factory)   -> data/sft/sharegpt_tool_calls.jsonl
* SWE trajectories with JSON-string fields -> data/sft/swe_json_strings.jsonl

All randomness comes from random.Random(seed); no clock, no uuid4.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

ROOT = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------- model
@dataclass
class Call:
    kind: str                 # bash | read_file | write_file | edit_file
    args: dict
    output: str = ""
    rc: int = 0
    duration: float = 1.0     # Terminus wait time


@dataclass
class Step:
    analysis: str
    plan: str
    calls: list
    say: str | None = None    # Claude-style assistant text (None -> analysis)


@dataclass
class Round:
    request: str
    steps: list
    summary: str


@dataclass
class Scenario:
    key: str
    title: str
    host: str
    cwd: str
    rounds: list              # first round = the task, later rounds = follow-ups
    kind: str = "single"      # single | cross
    mistake_file: str = ""    # a tracked file used for an injected (undone) mistake


def bash(cmd, out="", rc=0, dur=1.0):
    return Call("bash", {"command": cmd}, out, rc, dur)


def read(path, content):
    return Call("read_file", {"path": path}, content, 0, 0.1)


def write(path, content):
    return Call("write_file", {"path": path, "content": content}, f"Wrote {len(content.encode())} bytes to {path}", 0, 0.1)


def edit(path, old, new):
    return Call("edit_file", {"path": path, "old_string": old, "new_string": new},
                f"Edited {path}: replaced 1 occurrence", 0, 0.1)


def S(analysis, plan, *calls, say=None):
    return Step(analysis, plan, list(calls), say)


# --------------------------------------------------------------------------- text helpers
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
USERS = ["deploy", "etl", "svc-ledger", "www-data", "app", "ci"]
WORDS = ["alpha", "beacon", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
         "kestrel", "lumen", "meridian", "nimbus", "onyx", "pylon", "quartz", "raven", "sierra", "tundra"]


def hexid(rng, n=7):
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def rid(rng, n=7):
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


def det_uuid(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def ls_la(rng, entries, owner="root", group="root", total=None):
    """entries: list of (name, kind 'd'|'f'|'x'|'l', size) -> `ls -la` text."""
    lines = [f"total {total or rng.randint(24, 480)}"]
    base = [(".", "d", 4096), ("..", "d", 4096)]
    for name, kind, size in base + list(entries):
        perm = {"d": "drwxr-xr-x", "f": "-rw-r--r--", "x": "-rwxr-xr-x", "l": "lrwxrwxrwx",
                "s": "-rw-------", "g": "drwxrws---"}[kind]
        links = rng.randint(2, 9) if kind in "dg" else 1
        m = rng.choice(MONTHS[:10])
        d = rng.randint(1, 28)
        t = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        nm = name if kind != "l" else f"{name} -> {size}"
        sz = size if kind != "l" else len(str(size))
        lines.append(f"{perm} {links:2d} {owner:<8} {group:<8} {sz:>8} {m} {d:2d} {t} {nm}")
    return "\n".join(lines)


def ts_iter(rng, start, step_lo=0.2, step_hi=9.0):
    t = start
    while True:
        t = t + timedelta(seconds=rng.uniform(step_lo, step_hi))
        yield t


def journal(rng, host, unit, proc, pid0, events, start, repeat=1):
    """events: list of message strings; returns journalctl-like lines."""
    out = []
    it = ts_iter(rng, start)
    pid = pid0
    for r in range(repeat):
        for ev in events:
            t = next(it)
            src = "systemd[1]" if ev.startswith(("Started", "Stopped", "Starting", f"{unit}:", "Scheduled")) else f"{proc}[{pid}]"
            out.append(f"{t.strftime('%b %d %H:%M:%S')} {host} {src}: {ev}")
        pid += rng.randint(3, 40)
    return "\n".join(out)


def pytest_log(rng, root, files, failures, duration=None, extra_fail_text=""):
    """files: list of (path, ntests); failures: dict test_id -> short message."""
    n = sum(k for _, k in files)
    lines = ["============================= test session starts ==============================",
             "platform linux -- Python 3.11.9, pytest-8.2.2, pluggy-1.5.0",
             f"rootdir: {root}", "configfile: pyproject.toml", "plugins: cov-5.0.0, xdist-3.6.1",
             f"collected {n} items", ""]
    done = 0
    for path, k in files:
        marks = "".join("F" if any(f.startswith(path) and f.endswith(f"_{i}") for f in failures) else "." for i in range(k))
        done += k
        lines.append(f"{path} {marks:<40} [{int(100 * done / n):3d}%]")
    nf = len(failures)
    if nf:
        lines += ["", "=================================== FAILURES ==================================="]
        for tid, msg in failures.items():
            name = tid.split("::")[-1]
            lines += [f"_{'_' * 20} {name} {'_' * 20}", "", extra_fail_text or msg, ""]
        lines.append("=========================== short test summary info ============================")
        for tid, msg in failures.items():
            lines.append(f"FAILED {tid} - {msg.splitlines()[-1][:90]}")
    dur = duration or round(rng.uniform(0.8, 14.0), 2)
    tail = f"{nf} failed, {n - nf} passed" if nf else f"{n} passed"
    lines.append(f"{'=' * 22} {tail} in {dur}s {'=' * 22}")
    return "\n".join(lines)


def big_log_lines(rng, n, fmt):
    return "\n".join(fmt(rng, i) for i in range(n))


def pad_block(rng, title, n):
    """a long but plausible block (for the long records): verbose build log lines."""
    mods = ["core", "io", "net", "util", "parse", "store", "auth", "cache", "sched", "metrics"]
    out = [f"--- {title} ---"]
    for i in range(n):
        m = rng.choice(mods)
        f = f"src/{m}/{rng.choice(WORDS)}_{rng.randint(1, 40)}.c"
        out.append(f"cc -O2 -g -Wall -Wextra -fPIC -Iinclude -Isrc -DNDEBUG -MMD -MP -c {f} -o build/{f[4:-2]}.o")
        if rng.random() < 0.12:
            out.append(f"{f}:{rng.randint(10, 900)}:{rng.randint(2, 40)}: warning: unused variable 'tmp{rng.randint(0, 9)}' [-Wunused-variable]")
    return "\n".join(out)


# =========================================================================== scenarios
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


def sc_systemd(rng, long=False):
    svc = rng.choice(["invoice-api", "geo-tiles", "report-worker", "notify-hub"])
    host = f"app-{rng.randint(10, 40)}"
    port = rng.choice([8080, 8081, 9000, 5005])
    start = datetime(2024, rng.randint(1, 9), rng.randint(1, 28), 7, rng.randint(0, 59), tzinfo=timezone.utc)
    crash = [f"Starting {svc} service...", f"Started {svc} service.",
             f"INFO  [{svc}] loading config from /etc/{svc}/config.toml",
             f"INFO  [{svc}] opening cache /var/lib/{svc}/cache.sqlite",
             "Traceback (most recent call last):",
             f'  File "/opt/{svc}/app/main.py", line 88, in <module>',
             "    app = create_app()",
             f'  File "/opt/{svc}/app/main.py", line 61, in create_app',
             "    cache = Cache(settings.cache_path)",
             f'  File "/opt/{svc}/app/cache.py", line 23, in __init__',
             "    self.conn = sqlite3.connect(path, timeout=5)",
             f"sqlite3.OperationalError: unable to open database file",
             f"{svc}.service: Main process exited, code=exited, status=1/FAILURE",
             f"{svc}.service: Failed with result 'exit-code'.",
             f"{svc}.service: Scheduled restart job, restart counter is at N."]
    reps = 44 if long else 3
    jl = journal(rng, host, svc, "python3", rng.randint(2000, 9000), crash, start, repeat=reps)
    cnt = iter(range(1, 10000))
    jl = "\n".join(l.replace("counter is at N", f"counter is at {next(cnt)}") for l in jl.splitlines())
    status = f"""\u25cf {svc}.service - {svc} HTTP service
     Loaded: loaded (/etc/systemd/system/{svc}.service; enabled; preset: enabled)
     Active: activating (auto-restart) (Result: exit-code) since {start.strftime('%a %Y-%m-%d %H:%M:%S')} UTC; 2s ago
    Process: {rng.randint(20000, 30000)} ExecStart=/opt/{svc}/venv/bin/python -m app.main (code=exited, status=1/FAILURE)
   Main PID: {rng.randint(20000, 30000)} (code=exited, status=1/FAILURE)
        CPU: {rng.randint(300, 900)}ms"""
    unit = f"""[Unit]
Description={svc} HTTP service
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User={svc}
Group={svc}
WorkingDirectory=/opt/{svc}
Environment=PYTHONUNBUFFERED=1
Environment={svc.upper().replace('-', '_')}_PORT={port}
ExecStart=/opt/{svc}/venv/bin/python -m app.main
Restart=on-failure
RestartSec=3
NoNewPrivileges=true
ProtectSystem=strict
ProtectHome=true
ReadWritePaths=/var/log/{svc}

[Install]
WantedBy=multi-user.target
"""
    steps = [
        S(f"The task is about {svc}.service crash-looping. First the unit status and recent logs.",
          "Run systemctl status and the last journal entries for the unit.",
          bash(f"systemctl status {svc} --no-pager", status, rc=3),
          bash(f"journalctl -u {svc} -n {60 if not long else 400} --no-pager", jl, dur=2.0)),
        S(f"sqlite3 cannot open /var/lib/{svc}/cache.sqlite. Either the directory is missing, has the wrong owner, or the sandbox makes it read-only.",
          "Check the directory and the unit file.",
          bash(f"ls -la /var/lib/{svc}; id {svc}",
               ls_la(rng, [("cache.sqlite", "f", rng.randint(100, 900) * 1024), ("cache.sqlite-journal", "f", 0)], owner="root", group="root")
               + f"\nuid=99{rng.randint(1, 9)}({svc}) gid=99{rng.randint(1, 9)}({svc}) groups=99{rng.randint(1, 9)}({svc})"),
          read(f"/etc/systemd/system/{svc}.service", unit)),
        S(f"Two problems: /var/lib/{svc} and its files are owned by root (the service runs as {svc}), and ProtectSystem=strict makes "
          f"/var read-only except for ReadWritePaths, which only lists /var/log/{svc}. StateDirectory= fixes both: systemd creates the "
          "directory, chowns it to the service user, and makes it writable inside the sandbox.",
          "Add StateDirectory to the unit, reload systemd and restart.",
          edit(f"/etc/systemd/system/{svc}.service", f"ReadWritePaths=/var/log/{svc}\n",
               f"ReadWritePaths=/var/log/{svc}\nStateDirectory={svc}\nStateDirectoryMode=0750\n"),
          bash(f"systemctl daemon-reload && systemctl restart {svc} && sleep 3 && systemctl is-active {svc} && ls -la /var/lib/{svc}",
               "active\n" + ls_la(rng, [("cache.sqlite", "f", rng.randint(100, 900) * 1024), ("cache.sqlite-journal", "f", 0)], owner=svc, group=svc), dur=5.0)),
        S("It is active and systemd has taken over the ownership. I'll check that it really serves requests and isn't just between restarts.",
          "Query the health endpoint and make sure the restart counter stays put.",
          bash(f"curl -fsS localhost:{port}/healthz; echo; systemctl show {svc} -p NRestarts -p ActiveState",
               f'{{"status":"ok","cache":"sqlite","uptime_s":{rng.randint(5, 30)}}}\nNRestarts=0\nActiveState=active')),
    ]
    return Scenario("systemd-crashloop", "Fix a crash-looping systemd service", host, f"/opt/{svc}", [
        Round(f"{svc}.service on this box keeps restarting since this morning's hardening change. Find the cause and fix it properly (don't just run it as root).",
              steps, f"The service crashed because it could not open /var/lib/{svc}/cache.sqlite: the directory was owned by root, and the new ProtectSystem=strict sandbox left /var read-only except for /var/log/{svc}. I added StateDirectory={svc} (mode 0750) to the unit, so systemd now creates the directory, chowns it to the {svc} user and makes it writable in the sandbox. After daemon-reload and a restart the service is active, /healthz answers, and NRestarts is 0."),
    ], "cross", f"/etc/systemd/system/{svc}.service")


def sc_make(rng, long=False):
    proj = rng.choice(["libgeom", "tinystat", "rasterkit", "dsp-lite"])
    host = f"build-{rng.randint(1, 8)}"
    cwd = f"/home/ci/src/{proj}"
    objs = ["vec", "mat", "stats", "interp", "fft", "io"]
    cc = "\n".join(f"cc -O2 -g -Wall -Wextra -std=c11 -Iinclude -c src/{o}.c -o build/{o}.o" for o in objs)
    if long:
        cc = pad_block(rng, "verbose compile (V=1)", 520) + "\n" + cc
    err = "\n".join([f"cc -o build/{proj} build/main.o " + " ".join(f"build/{o}.o" for o in objs),
                     f"/usr/bin/ld: build/stats.o: in function `stddev':",
                     f"{cwd}/src/stats.c:{rng.randint(40, 90)}: undefined reference to `sqrt'",
                     f"/usr/bin/ld: build/interp.o: in function `cubic_eval':",
                     f"{cwd}/src/interp.c:{rng.randint(20, 70)}: undefined reference to `pow'",
                     f"/usr/bin/ld: build/fft.o: in function `fft_twiddle':",
                     f"{cwd}/src/fft.c:{rng.randint(20, 70)}: undefined reference to `cos'",
                     f"/usr/bin/ld: {cwd}/src/fft.c:{rng.randint(20, 70)}: undefined reference to `sin'",
                     "collect2: error: ld returned 1 exit status",
                     f"make: *** [Makefile:24: build/{proj}] Error 1"])
    mk = f"""CC      ?= cc
CFLAGS  ?= -O2 -g -Wall -Wextra -std=c11
CPPFLAGS = -Iinclude
LDFLAGS ?=
SRC     := $(wildcard src/*.c)
OBJ     := $(patsubst src/%.c,build/%.o,$(SRC))
BIN     := build/{proj}

.PHONY: all clean test
all: $(BIN)

build:
\tmkdir -p build

build/%.o: src/%.c | build
\t$(CC) $(CFLAGS) $(CPPFLAGS) -c $< -o $@

$(BIN): $(OBJ)
\t$(CC) $(LDFLAGS) -o $@ $^

test: $(BIN)
\t./tests/run.sh $(BIN)

clean:
\trm -rf build
"""
    tests = "\n".join(f"[ RUN  ] {t}\n[  OK  ] {t} ({rng.randint(0, 40)} ms)" for t in
                      ["vec_dot", "vec_norm", "mat_mul", "mat_inv", "stats_mean", "stats_stddev", "interp_linear",
                       "interp_cubic", "fft_roundtrip", "fft_parseval", "io_csv_roundtrip"])
    steps = [
        S("A C project that stopped linking. Reproduce the failure first.",
          "Run a clean build and capture the output.",
          bash("make clean && make -j4 2>&1 | tail -n 80" if not long else "make clean && make -j4 V=1 2>&1",
               "rm -rf build\nmkdir -p build\n" + f"cc -O2 -g -Wall -Wextra -std=c11 -Iinclude -c src/main.c -o build/main.o\n" + cc + "\n" + err, rc=2, dur=15.0)),
        S("All compile steps succeed; the link fails with undefined references to sqrt, pow, cos and sin. Those live in libm, "
          "and the link command doesn't have -lm.",
          "Look at the Makefile's link rule.",
          read("Makefile", mk), bash("git log --oneline -5 -- Makefile",
                                     f"{hexid(rng)} build: honour LDFLAGS from the environment\n{hexid(rng)} build: out-of-tree objects in build/\n{hexid(rng)} add fft module\n{hexid(rng)} initial import")),
        S("The recent 'honour LDFLAGS' commit replaced the hard-coded link line and dropped the libraries. Libraries belong in LDLIBS, after the objects "
          "(with --as-needed, -lm before the objects gets discarded).",
          "Add LDLIBS = -lm and put $(LDLIBS) after $^ in the link rule, then rebuild and run the tests.",
          edit("Makefile", "LDFLAGS ?=\n", "LDFLAGS ?=\nLDLIBS  += -lm\n"),
          edit("Makefile", "\t$(CC) $(LDFLAGS) -o $@ $^\n", "\t$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)\n"),
          bash("make -j4 2>&1 | tail -n 3 && make test", f"cc -o build/{proj} build/main.o " + " ".join(f"build/{o}.o" for o in objs) + " -lm\n./tests/run.sh build/" + proj + "\n" + tests + "\n11 tests, 0 failures", dur=10.0)),
    ]
    return Scenario("make-link-error", "Fix a failing C build", host, cwd, [
        Round(f"CI for {proj} fails at the link step since yesterday's Makefile change. Fix the build without changing any C sources.",
              steps, "The link failed with undefined references to sqrt/pow/cos/sin because the commit that started honouring LDFLAGS removed -lm from the link line. I added `LDLIBS += -lm` and put $(LDLIBS) after the objects in the link rule (libraries must come after the objects that use them). The build links again and all 11 tests pass."),
    ], "single", "Makefile")


def sc_packaging(rng, long=False):
    pkg = rng.choice(["reportgen", "invoicer", "tilecache", "metricsd"])
    host = f"dev-{rng.choice(WORDS)}"
    cwd = f"/home/dev/{pkg}"
    pip_err = f"""Obtaining file://{cwd}
  Installing build dependencies ... done
  Checking if build backend supports build_editable ... done
  Getting requirements to build editable ... error
  error: subprocess-exited-with-error

  \u00d7 Getting requirements to build editable did not run successfully.
  \u2502 exit code: 1
  \u2570\u2500> [14 lines of output]
      error: Multiple top-level packages discovered in a flat-layout: ['{pkg}', 'migrations', 'scripts'].

      To avoid accidental inclusion of unwanted files or directories,
      setuptools will not proceed with this build.

      If you are trying to create a single distribution with multiple packages
      on purpose, you should not rely on automatic discovery.
      Instead, consider the following options:

      1. set up custom discovery (`find` directive with `include` or `exclude`)
      2. use a `src-layout`
      3. explicitly set `py_modules` or `packages` with a list of names

      To find more information, look for "package discovery" on setuptools docs.
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error

\u00d7 Getting requirements to build editable did not run successfully.
\u2502 exit code: 1
\u2570\u2500> See above for output.

note: This error originates from a subprocess, and is likely not a problem with pip."""
    pyproject = f"""[build-system]
requires = ["setuptools>=68", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "{pkg}"
version = "0.{rng.randint(2, 9)}.{rng.randint(0, 9)}"
description = "Internal {pkg} tool"
requires-python = ">=3.10"
dependencies = ["click>=8", "jinja2>=3.1", "sqlalchemy>=2.0", "pyyaml>=6"]

[project.optional-dependencies]
test = ["pytest>=8", "pytest-cov"]

[project.scripts]
{pkg} = "{pkg}.main:cli"
"""
    ok = "\n".join([f"Obtaining file://{cwd}", "  Installing build dependencies ... done",
                    "  Checking if build backend supports build_editable ... done",
                    "  Getting requirements to build editable ... done",
                    "  Preparing editable metadata (pyproject.toml) ... done",
                    "Requirement already satisfied: click>=8 in ./.venv/lib/python3.11/site-packages (8.1.7)",
                    "Requirement already satisfied: jinja2>=3.1 in ./.venv/lib/python3.11/site-packages (3.1.4)",
                    "Requirement already satisfied: sqlalchemy>=2.0 in ./.venv/lib/python3.11/site-packages (2.0.31)",
                    "Requirement already satisfied: pyyaml>=6 in ./.venv/lib/python3.11/site-packages (6.0.1)",
                    "Building wheels for collected packages: " + pkg,
                    f"  Building editable for {pkg} (pyproject.toml) ... done",
                    f"  Created wheel for {pkg}: filename={pkg}-0.4.1-0.editable-py3-none-any.whl size=3312 sha256={hexid(rng, 64)}",
                    f"Successfully built {pkg}", f"Installing collected packages: {pkg}",
                    f"Successfully installed {pkg}-0.4.1"])
    steps = [
        S("Reproduce the install failure in the project's virtualenv.", "Run pip install -e . and look at the tree.",
          bash(".venv/bin/pip install -e '.[test]'", pip_err, rc=1, dur=10.0),
          bash("ls -la", ls_la(rng, [(".git", "d", 4096), (".venv", "d", 4096), ("README.md", "f", 1840), (pkg, "d", 4096),
                                     ("migrations", "d", 4096), ("pyproject.toml", "f", 612), ("scripts", "d", 4096), ("tests", "d", 4096)], owner="dev", group="dev"))),
        S("setuptools' automatic discovery finds three top-level packages (the app plus migrations/ and scripts/) and refuses to guess. "
          "Only the app package should be shipped.",
          "Read pyproject.toml and add an explicit packages.find include.",
          read("pyproject.toml", pyproject),
          edit("pyproject.toml", "[project.scripts]", f"[tool.setuptools.packages.find]\ninclude = [\"{pkg}*\"]\n\n[project.scripts]"),
          bash(".venv/bin/pip install -e '.[test]' 2>&1 | tail -n 15", ok, dur=10.0)),
        S("The install works now. Check that the console script entry point is valid.", "Run the CLI.",
          bash(f".venv/bin/{pkg} --version", f"Traceback (most recent call last):\n  File \"{cwd}/.venv/bin/{pkg}\", line 5, in <module>\n    from {pkg}.main import cli\nModuleNotFoundError: No module named '{pkg}.main'", rc=1),
          bash(f"ls {pkg}/ && grep -n 'def cli\\|@click.group' -r {pkg}/", f"__init__.py  __main__.py  cli.py  db.py  render.py  templates\n{pkg}/cli.py:14:@click.group()\n{pkg}/cli.py:16:def cli(ctx, config):")),
        S(f"The entry point names {pkg}.main but the click group lives in {pkg}/cli.py.", "Fix the script target, reinstall, run the CLI and the tests.",
          edit("pyproject.toml", f'{pkg} = "{pkg}.main:cli"', f'{pkg} = "{pkg}.cli:cli"'),
          bash(f".venv/bin/pip install -q -e '.[test]' && .venv/bin/{pkg} --version && .venv/bin/pytest -q",
               f"{pkg}, version 0.4.1\n" + pytest_log(rng, cwd, [("tests/test_cli.py", 5), ("tests/test_db.py", 7), ("tests/test_render.py", 9)], {}), dur=12.0)),
    ]
    return Scenario("pip-flat-layout", "Fix an editable install", host, cwd, [
        Round(f"`pip install -e .` fails for {pkg} after we added the migrations/ and scripts/ folders. Make it installable again and make sure the `{pkg}` command works.",
              steps, f"setuptools refused to build because automatic discovery found three top-level packages ({pkg}, migrations, scripts). I added `[tool.setuptools.packages.find] include = [\"{pkg}*\"]` so only the application package is shipped. The console script also pointed at a module that doesn't exist ({pkg}.main); it now points at {pkg}.cli:cli. The editable install succeeds, `{pkg} --version` works, and the test suite passes."),
    ], "single", "pyproject.toml")


def sc_git(rng, long=False):
    host = f"ws-{rng.choice(WORDS)}"
    repo = rng.choice(["billing-service", "edge-proxy", "search-api"])
    cwd = f"/home/dev/{repo}"
    h = [hexid(rng) for _ in range(8)]
    log = "\n".join([f"* {h[0]} (HEAD -> main) rate-limit: add per-tenant buckets",
                     f"* {h[1]} rate-limit: config loader + local .env",
                     f"* {h[2]} rate-limit: token bucket core",
                     f"* {h[3]} (origin/main, origin/HEAD) Merge pull request #{rng.randint(300, 900)} from team/fix-timeouts",
                     "|\\", f"| * {h[4]} http: lower upstream timeout to 5s", "|/",
                     f"* {h[5]} deps: bump sqlalchemy to 2.0.31", f"* {h[6]} ci: cache pip downloads"])
    show = f"""commit {h[1]}{hexid(rng, 33)}
Author: Dev User <dev@example.internal>
Date:   Tue Jun 11 16:{rng.randint(10, 59)}:02 2024 +0200

    rate-limit: config loader + local .env

 config/.env              |  6 ++++++
 src/ratelimit/config.py  | 48 ++++++++++++++++++++++++++++++++++++++++++++++++
 tests/test_rl_config.py  | 31 +++++++++++++++++++++++++++++++
 3 files changed, 85 insertions(+)"""
    nh = [hexid(rng) for _ in range(3)]
    steps = [
        S("Inspect the history to see exactly which commits are local-only.", "Show status and the graph.",
          bash("git status -sb && git log --oneline --graph -n 9", f"## main...origin/main [ahead 3]\n{log}")),
        S("Three local commits on main are the rate-limit work; origin/main is clean. The middle one should contain the .env.", "Check that commit's files.",
          bash(f"git show --stat {h[1]}", show)),
        S("config/.env was committed in the middle commit. Plan: branch the current HEAD as feature/rate-limit, reset main to origin/main, then rebase the branch "
          "with that one commit marked 'edit' to drop the file. Nothing has been pushed, so rewriting is safe.",
          "Create the branch and move main back.",
          bash("git branch feature/rate-limit HEAD && git reset --keep origin/main && git switch feature/rate-limit && git log --oneline -4",
               f"Switched to branch 'feature/rate-limit'\n{h[0]} (HEAD -> feature/rate-limit) rate-limit: add per-tenant buckets\n{h[1]} rate-limit: config loader + local .env\n{h[2]} rate-limit: token bucket core\n{h[3]} (origin/main, origin/HEAD, main) Merge pull request from team/fix-timeouts")),
        S("Main is back at origin/main. Now edit the commit that added config/.env.", "Non-interactive rebase with the second pick turned into edit.",
          bash("GIT_SEQUENCE_EDITOR=\"sed -i '2s/^pick/edit/'\" git rebase -i origin/main",
               f"Stopped at {h[1]}...  rate-limit: config loader + local .env\nYou can amend the commit now, with\n\n  git commit --amend \n\nOnce you are satisfied with your changes, run\n\n  git rebase --continue"),
          bash("git rm --cached -q config/.env && printf 'config/.env\\n' >> .gitignore && git add .gitignore && git commit -q --amend --no-edit && git rebase --continue",
               "Successfully rebased and updated refs/heads/feature/rate-limit.", dur=2.0)),
        S("Verify that no commit reachable from a branch still contains config/.env and that the working copy still has the file locally.",
          "git log over all branches for that path, check the branch contents.",
          bash("git log --all --oneline -- config/.env | grep -v '^$' | wc -l; git log --oneline origin/main..feature/rate-limit --stat | head -20; ls -la config/.env",
               f"0\n{nh[0]} rate-limit: add per-tenant buckets\n src/ratelimit/buckets.py | 77 ++++++++++\n 1 file changed, 77 insertions(+)\n{nh[1]} rate-limit: config loader + local .env\n .gitignore               |  1 +\n src/ratelimit/config.py  | 48 ++++++\n tests/test_rl_config.py  | 31 ++++\n 3 files changed, 80 insertions(+)\n{nh[2]} rate-limit: token bucket core\n src/ratelimit/bucket.py  | 112 ++++++++++++\n tests/test_bucket.py     |  64 +++++++\n 2 files changed, 176 insertions(+)\n-rw-r--r-- 1 dev dev 212 Jun 11 16:20 config/.env")),
    ]
    return Scenario("git-move-commits", "Move commits off main and drop a secret", host, cwd, [
        Round("I committed three rate-limit commits straight to main (not pushed). One of them added config/.env with real credentials. Move the commits to a branch feature/rate-limit, make sure .env is not in any commit, and put main back to origin/main. Keep my local .env file.",
              steps, f"main is back at origin/main ({h[3]}). The three commits now live on feature/rate-limit ({nh[2]}, {nh[1]}, {nh[0]}); the middle one was amended during a rebase so it no longer contains config/.env, and .gitignore now lists config/.env. `git log --all -- config/.env` finds no commit on any branch. Your local config/.env is untouched. The old commits remain in the reflog until it expires; since nothing was pushed, the credentials never left this machine. Rotate them anyway if you want to be safe."),
    ], "single", "")


def sc_nginx(rng, long=False):
    site = rng.choice(["shop", "docs", "status", "grafana"])
    dom = f"{site}.example.internal"
    host = f"web-{rng.randint(1, 6)}"
    up = rng.choice([3000, 8000, 8080])
    conf = f"""upstream {site}_app {{
    server 127.0.0.1:{up};
    keepalive 16;
}}

server {{
    listen 80 default_server;
    server_name {dom};
    return 301 https://$host$request_uri;
}}

server {{
    listen 443 ssl http2;
    server_name {dom};

    ssl_certificate     /etc/ssl/{site}/fullchain.pem;
    ssl_certificate_key /etc/ssl/{site}/privkey.pem;

    location /static/ {{
        alias /srv/{site}/static/
        expires 7d;
    }}

    location / {{
        proxy_pass http://{site}_app;
        proxy_set_header Host $host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    }}
}}
"""
    steps = [
        S("Start with nginx's own config test to see the exact error.", "Run nginx -t.",
          bash("nginx -t", f'nginx: [emerg] invalid number of arguments in "alias" directive in /etc/nginx/sites-enabled/{site}.conf:23\nnginx: configuration file /etc/nginx/nginx.conf test failed', rc=1)),
        S("Line 23 is inside the alias block; probably a missing semicolon that makes nginx read the next line as more arguments.", "Read the site config.",
          read(f"/etc/nginx/sites-enabled/{site}.conf", conf)),
        S("`alias /srv/.../static/` has no trailing semicolon, so `expires 7d` is parsed as extra alias arguments.", "Add the semicolon and test again.",
          edit(f"/etc/nginx/sites-enabled/{site}.conf", f"alias /srv/{site}/static/\n", f"alias /srv/{site}/static/;\n"),
          bash("nginx -t", f'nginx: [warn] duplicate listen options for [::]:80 in /etc/nginx/sites-enabled/default:22\nnginx: [emerg] a duplicate default server for 0.0.0.0:80 in /etc/nginx/sites-enabled/{site}.conf:7\nnginx: configuration file /etc/nginx/nginx.conf test failed', rc=1)),
        S("Next error: the distro's default site also claims default_server on port 80. The default site is not used on this host.",
          "Check what sites-enabled/default is and disable it rather than editing the packaged file.",
          bash("ls -la /etc/nginx/sites-enabled/", ls_la(rng, [("default", "l", "/etc/nginx/sites-available/default"), (f"{site}.conf", "f", len(conf))])),
          bash("rm /etc/nginx/sites-enabled/default && nginx -t && systemctl reload nginx && curl -skI https://127.0.0.1/ -H 'Host: " + dom + "' | head -5",
               "nginx: the configuration file /etc/nginx/nginx.conf syntax is ok\nnginx: configuration file /etc/nginx/nginx.conf test is successful\nHTTP/2 200 \nserver: nginx/1.24.0\ndate: Wed, 12 Jun 2024 09:41:07 GMT\ncontent-type: text/html; charset=utf-8\ncontent-length: " + str(rng.randint(2000, 40000)), dur=3.0)),
    ]
    return Scenario("nginx-config", "Repair an nginx site config", host, "/etc/nginx", [
        Round(f"nginx on this host won't reload after someone edited the {site} site. Fix the configuration and reload nginx; the site must answer on https for {dom}.",
              steps, f"There were two problems. {site}.conf was missing a semicolon after the `alias` directive in the /static/ location, and the distro's `default` site (a symlink in sites-enabled) also declared default_server on port 80. I added the semicolon and removed the default symlink (the packaged file in sites-available is untouched). `nginx -t` passes, nginx is reloaded, and https://{dom}/ returns 200."),
    ], "cross", "")


def sc_perms(rng, long=False):
    grp = rng.choice(["analytics", "finance", "research"])
    users = rng.sample(["alice", "bob", "chen", "dana", "emil", "farah"], 3)
    host = f"share-{rng.randint(1, 5)}"
    d = f"/srv/shared/{grp}"
    lst = ls_la(rng, [(f"q{q}_report.xlsx", "f", rng.randint(40000, 900000)) for q in range(1, 4)] + [("drafts", "d", 4096), ("raw", "d", 4096)],
                owner=users[0], group=users[0])
    steps = [
        S("Check the group membership and the current ownership and mode of the share.", "id for each user, ls -la, getfacl.",
          bash(f"for u in {' '.join(users)}; do id $u; done; ls -la {d}; getfacl -p {d}",
               "\n".join(f"uid={1001 + i}({u}) gid={1001 + i}({u}) groups={1001 + i}({u}),2{rng.randint(100, 999)}({grp})" for i, u in enumerate(users)) + "\n" + lst +
               f"\n# file: {d}\n# owner: {users[0]}\n# group: {users[0]}\nuser::rwx\ngroup::r-x\nother::r-x\n")),
        S(f"Everything is owned by {users[0]}'s private group, the directory has no setgid bit and there are no default ACLs, so new files get each creator's private group "
          "and the others can't modify them. Fix: group-own everything by the project group, set setgid on directories, give the group rw, and add default ACLs so new files are group-writable regardless of umask.",
          "Apply chgrp, chmod (dirs 2770, files 660) and default ACLs.",
          bash(f"chgrp -R {grp} {d} && find {d} -type d -exec chmod 2770 {{}} + && find {d} -type f -exec chmod 660 {{}} + && setfacl -R -m g:{grp}:rwX -m d:g:{grp}:rwX -m d:o::--- {d} && getfacl -p {d}",
               f"# file: {d}\n# owner: {users[0]}\n# group: {grp}\n# flags: -s-\nuser::rwx\ngroup::rwx\ngroup:{grp}:rwx\nmask::rwx\nother::---\ndefault:user::rwx\ndefault:group::rwx\ndefault:group:{grp}:rwx\ndefault:mask::rwx\ndefault:other::---\n")),
        S("Test from a different user: create a file, then have a third user edit it.", "Use sudo -u to simulate the users.",
          bash(f"sudo -u {users[1]} sh -c 'umask 022; echo draft > {d}/drafts/test_{users[1]}.txt' && sudo -u {users[2]} sh -c 'echo edit >> {d}/drafts/test_{users[1]}.txt' && ls -la {d}/drafts/test_{users[1]}.txt && rm {d}/drafts/test_{users[1]}.txt",
               f"-rw-rw----+ 1 {users[1]} {grp} 11 Jun 12 10:02 {d}/drafts/test_{users[1]}.txt")),
    ]
    return Scenario("shared-dir-perms", "Fix permissions on a shared directory", host, d, [
        Round(f"Members of the {grp} group can't edit each other's files in {d}. Set it up so every file created there is editable by the whole group and not readable by others, even for users with umask 022.",
              steps, f"The share and its files were owned by {users[0]}'s private group, with no setgid bit and no default ACLs. I changed the group of everything to {grp}, set directories to 2770 (setgid, so new files inherit the group) and files to 660, and added default ACLs (g:{grp}:rwX, other none) so new files stay group-writable even when the creator's umask is 022. A file created by {users[1]} with umask 022 could be edited by {users[2]}; I removed that test file afterwards."),
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


def sc_diskfull(rng, long=False):
    app = rng.choice(["orders", "mailer", "ingest"])
    host = f"worker-{rng.randint(1, 30)}"
    big = rng.randint(18, 41)
    df = f"""Filesystem      Size  Used Avail Use% Mounted on
/dev/nvme0n1p1   30G   12G   17G  42% /
/dev/nvme0n1p3   50G   50G     0 100% /var
tmpfs           3.9G     0  3.9G   0% /dev/shm"""
    du = f"""8.0K\t/var/mail
24K\t/var/tmp
310M\t/var/cache
1.2G\t/var/lib
{big + 6}G\t/var/log
{big + 8}G\t/var"""
    lst = ls_la(rng, [(f"{app}.log", "f", rng.randint(10, 12) * 1024 ** 3), (f"{app}.log.1", "f", 0)] +
                [(f"{app}.log.{i}.gz", "f", rng.randint(80, 400) * 1024 ** 2) for i in range(2, 5)], owner=app, group=app)
    lr = f"""/var/log/{app}/*.log {{
    daily
    rotate 14
    compress
    delaycompress
    missingok
    notifempty
    create 0640 {app} {app}
}}
"""
    steps = [
        S("Confirm which filesystem is full and where the space went.", "df and du on /var.",
          bash("df -h && du -xh --max-depth=1 /var 2>/dev/null | sort -h | tail -6", df + "\n" + du, dur=5.0)),
        S("/var/log holds most of it. Drill into the app's log directory.", "ls the app log dir and run logrotate in debug mode.",
          bash(f"ls -la /var/log/{app} && logrotate -d /etc/logrotate.d/{app} 2>&1 | tail -5", lst +
               f"\nreading config file /etc/logrotate.d/{app}\nerror: skipping \"/var/log/{app}/{app}.log\" because parent directory has insecure permissions (It's world writable or writable by group which is not \"root\") Set \"su\" directive in config file to tell logrotate which user/group should be used for rotation.")),
        S(f"logrotate has been skipping the file because /var/log/{app} is owned by {app}. The fix is a `su {app} {app}` directive. The live log is ~{big}G, so "
          "after fixing rotation I will force one rotation. The service keeps the file open, so use copytruncate rather than deleting the file.",
          "Edit the logrotate config, force rotation, check space.",
          read(f"/etc/logrotate.d/{app}", lr),
          edit(f"/etc/logrotate.d/{app}", "    create 0640", f"    su {app} {app}\n    copytruncate\n    maxsize 1G\n    create 0640"),
          bash(f"logrotate -f /etc/logrotate.d/{app} && ls -la /var/log/{app} | head -6 && df -h /var",
               "\n".join(ls_la(rng, [(f"{app}.log", "f", 0), (f"{app}.log.1", "f", rng.randint(10, 12) * 1024 ** 3)], owner=app, group=app).splitlines()[:6]) +
               f"\nFilesystem      Size  Used Avail Use% Mounted on\n/dev/nvme0n1p3   50G   50G     0 100% /var", dur=30.0)),
        S("Still 100%: the rotated copy is uncompressed (delaycompress) and still large. Compress it now instead of waiting a day.", "gzip the .1 file and re-check.",
          bash(f"nice gzip -9 /var/log/{app}/{app}.log.1 && df -h /var && ls -la /var/log/{app}",
               f"Filesystem      Size  Used Avail Use% Mounted on\n/dev/nvme0n1p3   50G   {50 - big + 3}G   {big - 3}G  {int(100 * (50 - big + 3) / 50)}% /var\n" +
               ls_la(rng, [(f"{app}.log", "f", rng.randint(1000, 90000)), (f"{app}.log.1.gz", "f", rng.randint(300, 900) * 1024 ** 2)] +
                     [(f"{app}.log.{i}.gz", "f", rng.randint(80, 400) * 1024 ** 2) for i in range(2, 5)], owner=app, group=app), dur=60.0)),
    ]
    return Scenario("disk-full-logrotate", "Free /var and fix log rotation", host, "/var/log", [
        Round(f"/var is at 100% on this worker and the {app} service is failing writes. Free space safely and make sure it doesn't happen again.",
              steps, f"/var filled up because logrotate had been skipping /var/log/{app}/*.log: the directory is owned by {app}, and logrotate refuses to rotate there without a `su` directive. I added `su {app} {app}`, `copytruncate` (the service keeps the file open) and `maxsize 1G` to /etc/logrotate.d/{app}, forced a rotation and compressed the rotated {big}G file. /var now has about {big - 3}G free, and daily rotation works again."),
    ], "cross", "")


def sc_cron(rng, long=False):
    host = f"db-{rng.randint(1, 3)}"
    db = rng.choice(["shop", "crm", "inventory"])
    steps = [
        S("Check the crontab and whether cron actually ran the job.", "crontab -l and grep syslog for the job.",
          bash("crontab -l; grep -a 'CRON.*backup' /var/log/syslog | tail -4",
               f"# m h dom mon dow command\n30 2 * * * /opt/backup/pg_backup.sh >> /var/log/pg_backup.log 2>&1\n" +
               "\n".join(f"Jun {d} 02:30:01 {host} CRON[{rng.randint(10000, 60000)}]: (root) CMD (/opt/backup/pg_backup.sh >> /var/log/pg_backup.log 2>&1)" for d in range(9, 13)))),
        S("Cron runs it every night, so the script itself fails. Its log should say why.", "Tail the backup log and run the script by hand.",
          bash("tail -3 /var/log/pg_backup.log; /opt/backup/pg_backup.sh", "/bin/sh: 1: /opt/backup/pg_backup.sh: not found\n/bin/sh: 1: /opt/backup/pg_backup.sh: not found\n/bin/sh: 1: /opt/backup/pg_backup.sh: not found\nbash: /opt/backup/pg_backup.sh: /bin/bash^M: bad interpreter: No such file or directory", rc=126)),
        S("'/bin/bash^M: bad interpreter': the script has Windows CRLF line endings (it was edited on a laptop and copied over).", "Confirm with file, strip the CRs, run it.",
          bash("file /opt/backup/pg_backup.sh && sed -i 's/\\r$//' /opt/backup/pg_backup.sh && file /opt/backup/pg_backup.sh && /opt/backup/pg_backup.sh",
               f"/opt/backup/pg_backup.sh: Bourne-Again shell script, ASCII text executable, with CRLF line terminators\n/opt/backup/pg_backup.sh: Bourne-Again shell script, ASCII text executable\n[2024-06-12 10:11:02] dumping {db} ...\n[2024-06-12 10:11:{rng.randint(20, 59)}] wrote /backups/{db}-20240612-1011.sql.gz ({rng.randint(200, 900)} MB)\n[2024-06-12 10:11:59] pruning backups older than 14 days: 0 removed", dur=40.0)),
        S("Works by hand. Add a .gitattributes rule in the ops repo so this can't come back? The script lives in /opt/backup, which is a checkout.", "Check git and add eol=lf.",
          bash("cd /opt/backup && git status -s && printf '*.sh text eol=lf\\n' >> .gitattributes && git add .gitattributes pg_backup.sh && git commit -qm 'backup: force LF endings for shell scripts' && git log --oneline -1",
               f" M pg_backup.sh\n{hexid(rng)} backup: force LF endings for shell scripts")),
    ]
    return Scenario("cron-crlf", "Fix a nightly backup cron job", host, "/root", [
        Round(f"The nightly postgres backup for {db} hasn't produced a file since June 9. Find out why and fix it.",
              steps, f"cron was running /opt/backup/pg_backup.sh every night, but the script had CRLF line endings since the June 9 change, so the kernel looked for the interpreter '/bin/bash\\r' and the script never started. I stripped the carriage returns, ran the backup by hand (it wrote /backups/{db}-20240612-1011.sql.gz), and committed a .gitattributes rule (`*.sh text eol=lf`) in /opt/backup so the script can't be checked out with CRLF again."),
    ], "single", "/opt/backup/pg_backup.sh")


def sc_tz(rng, long=False):
    host = f"dev-{rng.choice(WORDS)}"
    cwd = "/home/dev/scheduler"
    tb = f"""    def test_next_run_crosses_dst():
        job = Job(cron="30 1 * * *", tz="Europe/Berlin")
        after = datetime(2024, 3, 30, 12, 0, tzinfo=timezone.utc)
>       assert job.next_run(after) == datetime(2024, 3, 31, 0, 30, tzinfo=timezone.utc)
E       AssertionError: assert datetime.datetime(2024, 3, 31, 1, 30) == datetime.datetime(2024, 3, 31, 0, 30, tzinfo=datetime.timezone.utc)
E        +  where datetime.datetime(2024, 3, 31, 1, 30) = <bound method Job.next_run of Job(cron='30 1 * * *', tz='Europe/Berlin')>(datetime.datetime(2024, 3, 30, 12, 0, tzinfo=datetime.timezone.utc))

tests/test_job.py:{rng.randint(40, 80)}: AssertionError"""
    src = '''from dataclasses import dataclass
from datetime import datetime, timedelta

from .cronexpr import CronExpr


@dataclass
class Job:
    cron: str
    tz: str = "UTC"

    def next_run(self, after: datetime) -> datetime:
        expr = CronExpr(self.cron)
        t = after.replace(tzinfo=None, second=0, microsecond=0) + timedelta(minutes=1)
        while not expr.matches(t):
            t += timedelta(minutes=1)
        return t
'''
    steps = [
        S("Run the failing tests to see the assertion.", "pytest -x on the test module.",
          bash(".venv/bin/pytest -q tests/test_job.py", pytest_log(rng, cwd, [("tests/test_job.py", 6)], {"tests/test_job.py::test_next_run_crosses_dst": "AssertionError"}, extra_fail_text=tb), rc=1, dur=4.0)),
        S("next_run returns a naive datetime at 01:30, wall time in the wrong zone: it drops tzinfo and never converts into the job's zone.", "Read scheduler/job.py.",
          read("scheduler/job.py", src)),
        S("Fix: convert `after` into the job's zone with zoneinfo, search in local wall time, then attach the zone and return UTC.",
          "Rewrite next_run and rerun the whole suite.",
          edit("scheduler/job.py", "from datetime import datetime, timedelta\n", "from datetime import datetime, timedelta, timezone\nfrom zoneinfo import ZoneInfo\n"),
          edit("scheduler/job.py", "        t = after.replace(tzinfo=None, second=0, microsecond=0) + timedelta(minutes=1)\n        while not expr.matches(t):\n            t += timedelta(minutes=1)\n        return t\n",
               "        zone = ZoneInfo(self.tz)\n        local = after.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)\n        t = local + timedelta(minutes=1)\n        while not expr.matches(t):\n            t += timedelta(minutes=1)\n        return t.replace(tzinfo=zone).astimezone(timezone.utc)\n"),
          bash(".venv/bin/pytest -q", pytest_log(rng, cwd, [("tests/test_cronexpr.py", 14), ("tests/test_job.py", 6), ("tests/test_runner.py", 5)], {}), dur=5.0)),
    ]
    return Scenario("tz-naive-datetime", "Fix a timezone bug", host, cwd, [
        Round("tests/test_job.py::test_next_run_crosses_dst fails. Fix the scheduler (not the test).", steps,
              "Job.next_run stripped tzinfo from the input and searched in naive time, so it ignored the job's timezone and returned a naive datetime. It now converts the input to the job's zone (zoneinfo), searches in local wall-clock time, and returns an aware UTC datetime. All 25 tests pass, including the DST test."),
    ], "single", "scheduler/job.py")


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


def sc_ssh(rng, long=False):
    host = f"deploy-{rng.randint(1, 9)}"
    target = f"app{rng.randint(1, 9)}.prod.internal"
    steps = [
        S("Reproduce the failing ssh connection verbosely.", "ssh -v with BatchMode.",
          bash(f"sudo -u deploy ssh -o BatchMode=yes -v deploy@{target} true 2>&1 | tail -12",
               f"debug1: Connecting to {target} [10.20.{rng.randint(0, 255)}.{rng.randint(1, 254)}] port 22.\ndebug1: Connection established.\ndebug1: identity file /home/deploy/.ssh/id_ed25519 type 3\ndebug1: Authenticating to {target}:22 as 'deploy'\ndebug1: Host '{target}' is known and matches the ED25519 host key.\ndebug1: Authentications that can continue: publickey\ndebug1: Next authentication method: publickey\ndebug1: Trying private key: /home/deploy/.ssh/id_ed25519\n@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n@         WARNING: UNPROTECTED PRIVATE KEY FILE!          @\n@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\nPermissions 0644 for '/home/deploy/.ssh/id_ed25519' are too open.\nThis private key will be ignored.\ndeploy@{target}: Permission denied (publickey).", rc=255)),
        S("The private key is world-readable, so ssh ignores it. Check the whole .ssh directory.", "ls -la ~deploy/.ssh.",
          bash("ls -la /home/deploy/.ssh", ls_la(rng, [("authorized_keys", "f", 405), ("config", "f", 180), ("id_ed25519", "f", 411), ("id_ed25519.pub", "f", 103), ("known_hosts", "f", 2656)], owner="deploy", group="deploy"))),
        S("Fix modes: directory 700, private key and config 600, and make sure deploy owns everything.", "chmod/chown and retry.",
          bash(f"chown -R deploy:deploy /home/deploy/.ssh && chmod 700 /home/deploy/.ssh && chmod 600 /home/deploy/.ssh/id_ed25519 /home/deploy/.ssh/config && sudo -u deploy ssh -o BatchMode=yes deploy@{target} 'hostname; uptime'",
               f"{target.split('.')[0]}\n 10:{rng.randint(10, 59)}:{rng.randint(10, 59)} up {rng.randint(2, 90)} days,  2:1{rng.randint(0, 9)},  0 users,  load average: 0.{rng.randint(10, 99)}, 0.{rng.randint(10, 99)}, 0.{rng.randint(10, 99)}")),
    ]
    return Scenario("ssh-key-perms", "Fix ssh key permissions for deploys", host, "/root", [
        Round(f"Deploys from this host fail with 'Permission denied (publickey)' when connecting to {target} as the deploy user. Fix it.", steps,
              f"ssh ignored /home/deploy/.ssh/id_ed25519 because the key was mode 0644 ('UNPROTECTED PRIVATE KEY FILE'). I set ~deploy/.ssh to 700 and the key and config to 600, owned by deploy. `ssh deploy@{target}` now authenticates with the key."),
    ], "single", "")


def sc_venv(rng, long=False):
    tool = rng.choice(["exporter", "billing-sync", "mailq"])
    host = f"ops-{rng.randint(1, 9)}"
    reqs = ["requests==2.32.3", "PyYAML==6.0.1", "click==8.1.7", "prometheus-client==0.20.0", "SQLAlchemy==2.0.31", "psycopg[binary]==3.1.19"]
    coll = "\n".join(f"Collecting {r}\n  Using cached {r.split('==')[0].replace('[binary]', '').lower().replace('-', '_')}-{r.split('==')[1]}-py3-none-any.whl ({rng.randint(50, 900)} kB)" for r in reqs)
    steps = [
        S("Reproduce: run the tool's entry point.", "Call the binary and look at its shebang.",
          bash(f"/opt/{tool}/venv/bin/{tool} --help; head -1 /opt/{tool}/venv/bin/{tool}; ls -la /opt/{tool}/venv/bin/ | grep python",
               f"bash: /opt/{tool}/venv/bin/{tool}: /opt/{tool}/venv/bin/python3.10: bad interpreter: No such file or directory\n#!/opt/{tool}/venv/bin/python3.10\nlrwxrwxrwx 1 root root   16 Feb  3  2023 python -> python3.10\nlrwxrwxrwx 1 root root   16 Feb  3  2023 python3 -> python3.10\nlrwxrwxrwx 1 root root   24 Feb  3  2023 python3.10 -> /usr/bin/python3.10", rc=126)),
        S("The OS upgrade replaced python3.10 with 3.12, so the venv's interpreter symlink dangles. venvs aren't portable across Python versions; rebuild it from requirements.txt.",
          "Move the old venv aside, create a new one, install requirements.",
          bash(f"cd /opt/{tool} && python3 --version && mv venv venv.py310.bak && python3 -m venv venv && venv/bin/pip install -q --upgrade pip && venv/bin/pip install -r requirements.txt -e . 2>&1 | tail -n 20",
               "Python 3.12.3\n" + coll + f"\nBuilding wheels for collected packages: {tool}\nSuccessfully built {tool}\nInstalling collected packages: " + ", ".join(r.split('==')[0] for r in reqs) + f", {tool}\nSuccessfully installed " + " ".join(r.replace("==", "-").replace("[binary]", "") for r in reqs) + f" {tool}-1.3.0", dur=45.0)),
        S("Rebuilt. Run the tool and the timer-driven service once.", "--help, then start the oneshot service and read its log.",
          bash(f"/opt/{tool}/venv/bin/{tool} --help | head -4 && systemctl start {tool}.service && journalctl -u {tool} -n 3 --no-pager",
               f"Usage: {tool} [OPTIONS] COMMAND [ARGS]...\n\n  {tool} maintenance commands.\n\n" +
               journal(rng, host, tool, tool, rng.randint(1000, 9000), [f"Starting {tool}.service...", f"INFO run complete: {rng.randint(10, 900)} records", f"Stopped {tool}.service."], datetime(2024, 6, 12, 11, 0, tzinfo=timezone.utc)), dur=5.0)),
    ]
    return Scenario("venv-bad-interpreter", "Rebuild a virtualenv after a Python upgrade", host, f"/opt/{tool}", [
        Round(f"After the OS upgrade, /opt/{tool} fails with 'bad interpreter'. Get it working again.", steps,
              f"The venv in /opt/{tool} pointed at /usr/bin/python3.10, which the upgrade removed (the system now has 3.12). A venv is tied to the interpreter it was made with, so I moved the old one to venv.py310.bak and built a new venv with python3.12 from requirements.txt, plus the package itself in editable mode. The CLI runs and the {tool}.service oneshot completes. You can delete venv.py310.bak once you are happy."),
    ], "single", "")


SCENARIOS = [sc_csv_pipeline, sc_ledger, sc_systemd, sc_make, sc_packaging, sc_git, sc_nginx, sc_perms,
             sc_accesslog, sc_diskfull, sc_cron, sc_tz, sc_sqlite, sc_ssh, sc_venv]


# =========================================================================== prompts and schemas
CLAUDE_SYSTEM = """You are a software engineering agent working inside a Linux machine through a set of tools. You solve the user's task by inspecting the system, running commands and editing files.

Guidelines:
- Investigate before changing anything: read logs, configuration and code to find the root cause.
- Prefer small, targeted changes. Never weaken security (no chmod 777, no running services as root) to make an error go away.
- Keep backups of data you are about to rewrite, and verify each fix by re-running the failing command or test.
- Use the bash tool for shell commands; use read_file, write_file and edit_file for files.
- Tool output may be truncated. Ask for specific line ranges when you need more.
- When you are done, reply with a short summary of the cause, what you changed and how you verified it."""

TOOLS = [
    {"type": "function", "function": {
        "name": "bash",
        "description": "Run a shell command in a persistent bash session on the machine. Returns combined stdout and stderr; a non-zero exit code is appended.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "The command line to run."},
            "timeout": {"type": "integer", "description": "Seconds before the command is killed (default 120)."}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Read a text file and return it with line numbers.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Absolute path, or path relative to the working directory."},
            "offset": {"type": "integer", "description": "First line to return (1-based)."},
            "limit": {"type": "integer", "description": "Maximum number of lines."}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file",
        "description": "Create or overwrite a file with the given content.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "edit_file",
        "description": "Replace exactly one occurrence of old_string with new_string in a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
            "required": ["path", "old_string", "new_string"]}}},
]

T2_PROMPT = """You are an AI assistant tasked with solving command-line tasks in a Linux environment. You will be given a task description and the output from previously executed commands. Your goal is to solve the task by providing batches of shell commands.

Format your response as JSON with the following structure:

{{
  "analysis": "Analyze the current state based on the terminal output provided. What do you see? What has been accomplished? What still needs to be done?",
  "plan": "Describe your plan for the next steps. What commands will you run and why? Be specific about what you expect each command to accomplish.",
  "commands": [
    {{
      "keystrokes": "ls -la\\n",
      "duration": 0.1
    }},
    {{
      "keystrokes": "cd project\\n",
      "duration": 0.1
    }}
  ],
  "task_complete": true
}}

Required fields:
- "analysis": Your analysis of the current situation
- "plan": Your plan for the next steps
- "commands": Array of command objects to execute

Optional fields:
- "task_complete": Boolean indicating if the task is complete (defaults to false if not present)

Command object structure:
- "keystrokes": String containing the exact keystrokes to send to the terminal (required)
- "duration": Number of seconds to wait for the command to complete before the next command will be executed (defaults to 1.0 if not present)

IMPORTANT: The text inside "keystrokes" will be used completely verbatim as keystrokes. Write commands exactly as you want them sent to the terminal:
- Most bash commands should end with a newline (\\n) to cause them to execute
- For special key sequences, use tmux-style escape sequences:
  - C-c for Ctrl+C
  - C-d for Ctrl+D

The "duration" attribute specifies the number of seconds to wait for the command to complete (default: 1.0) before the next command will be executed. On immediate tasks (e.g., cd, ls, echo, cat) set a duration of 0.1 seconds. On commands (e.g., gcc, find, rustc) set a duration of 1.0 seconds. On slow commands (e.g., make, python3 [long running script], wget [file]) set an appropriate duration as you determine necessary.

It is better to set a smaller duration than a longer duration. It is always possible to wait again if the prior output has not finished, by running {{"keystrokes": "", "duration": 10.0}} on subsequent requests to wait longer. Never wait longer than 60 seconds; prefer to poll to see intermediate result status.

Important notes:
- Each command's keystrokes are sent exactly as written to the terminal
- Do not include extra whitespace before or after the keystrokes unless it's part of the intended command
- Extra text before or after the JSON will generate warnings but be tolerated
- The JSON must be valid - use proper escaping for quotes and special characters within strings
- Commands array can be empty if you want to wait without taking action

Task Description:
{instruction}

Current terminal state:
{terminal_state}
"""

T1_PROMPT = """You are an AI assistant tasked with solving command-line tasks in a Linux environment. You will be given a task instruction and the output from previously executed commands. Your goal is to solve the task by providing batches of shell commands.

For each response:
1. Analyze the current state based on any terminal output provided
2. Determine the next set of commands needed to make progress
3. Decide if you need to see the output of these commands before proceeding

Instruction:
{instruction}

Your response must be a JSON object that matches this schema:

{{
  "state_analysis": "Description of the current state of the terminal",
  "explanation": "Brief explanation of what these commands will do",
  "commands": [
    {{
      "keystrokes": "Keystrokes to execute in the terminal. Use tmux-style escape sequences for modifier keys (e.g. C-c for ctrl-c).",
      "is_blocking": "Whether to wait for and return the terminal output after executing these keystrokes. Set to false for interactive programs (vim, less, a REPL) that never return to the prompt.",
      "timeout_sec": "The number of expected seconds to wait for the command to complete."
    }}
  ],
  "is_task_complete": "Whether the task is complete following the execution of these commands."
}}

Don't include markdown formatting.

Note that you operate directly on the terminal. If you would like to execute a command that you have written you will need to append a newline character to the end of your command.

For example, if you write "ls -la" you will need to append a newline character to the end of your command like this: `ls -la\\n`.

One thing to be very careful about is handling interactive sessions like less, vim, or git diff. In these cases, you should not wait for the output of the command. Instead, you should send the keystrokes to the terminal as if you were typing them.

The current terminal state is:
{terminal_state}
"""

CONFIRM = ("Are you sure you want to mark the task as complete? This will trigger your solution to be graded and you won't be able "
           "to make any further corrections. If so, include \"task_complete\": true in your JSON response again.")


# =========================================================================== renderers
def call_to_keystrokes(c: Call) -> str:
    if c.kind == "bash":
        return c.args["command"] + "\n"
    if c.kind == "read_file":
        return f"cat {c.args['path']}\n"
    if c.kind == "write_file":
        body = c.args["content"] if c.args["content"].endswith("\n") else c.args["content"] + "\n"
        return f"cat > {c.args['path']} <<'EOF'\n{body}EOF\n"
    if c.kind == "edit_file":
        return ("python3 - <<'EOF'\nimport pathlib\n"
                f"p = pathlib.Path({c.args['path']!r})\ns = p.read_text()\n"
                f"old = {c.args['old_string']!r}\nassert s.count(old) == 1, s.count(old)\n"
                f"p.write_text(s.replace(old, {c.args['new_string']!r}))\nEOF\n")
    raise ValueError(c.kind)


def screen_output(c: Call) -> str:
    if c.kind in ("bash", "read_file"):
        return c.output
    return ""


def limit_output(text, limit=10000):
    b = text.encode()
    if len(b) <= limit:
        return text
    half = limit // 2
    head = b[:half].decode(errors="ignore")
    tail = b[-half:].decode(errors="ignore")
    return f"{head}\n[... output limited to {limit} bytes; {len(b) - 2 * half} interior bytes omitted ...]\n{tail}"


def render_screen(sc: Scenario, calls) -> str:
    prompt = f"root@{sc.host}:{sc.cwd}# "
    parts = []
    for c in calls:
        ks = call_to_keystrokes(c).rstrip("\n").split("\n")
        parts.append(prompt + ks[0])
        parts += ["> " + l for l in ks[1:]]
        out = screen_output(c)
        if out:
            parts.append(out)
    parts.append(prompt)
    return "\n".join(parts)


def t2_action(analysis, plan, commands, complete=False):
    return json.dumps({"analysis": analysis, "plan": plan, "commands": commands, "task_complete": complete}, indent=2, ensure_ascii=False)


def t1_action(analysis, plan, commands, complete=False):
    return json.dumps({"state_analysis": analysis, "explanation": plan,
                       "commands": [{"keystrokes": c["keystrokes"], "is_blocking": True,
                                     "timeout_sec": max(1, int(round(c["duration"] * 3)))} for c in commands],
                       "is_task_complete": complete}, indent=4, ensure_ascii=False)


def initial_screen(sc):
    return f"root@{sc.host}:{sc.cwd}# \n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"


def terminus_episodes(sc: Scenario, rng, confirm=False):
    """-> list of episodes: dict(analysis, plan, commands, complete, observation)."""
    eps = []
    rnd = sc.rounds[0]
    for st in rnd.steps:
        cmds = [{"keystrokes": call_to_keystrokes(c), "duration": round(min(max(c.duration, 0.1), 10.0), 1)} for c in st.calls]
        obs = limit_output(render_screen(sc, st.calls))
        eps.append(dict(analysis=st.analysis, plan=st.plan, commands=cmds, complete=False, observation=obs, calls=st.calls))
    done_obs = f"root@{sc.host}:{sc.cwd}# "
    eps.append(dict(analysis=rnd.summary, plan="The task is complete; no further commands are needed.", commands=[],
                    complete=True, observation=done_obs, calls=[]))
    if confirm:
        eps.append(dict(analysis="I re-checked the results above: the fix is in place and verified. Confirming completion.",
                        plan="No further commands.", commands=[], complete=True, observation=done_obs, calls=[]))
    return eps


def terminus_messages(sc, rng, harness="terminus_2", confirm=False):
    eps = terminus_episodes(sc, rng, confirm)
    tmpl = T2_PROMPT if harness == "terminus_2" else T1_PROMPT
    msgs = [{"role": "user", "content": tmpl.format(instruction=sc.rounds[0].request, terminal_state=initial_screen(sc))}]
    act = t2_action if harness == "terminus_2" else t1_action
    for i, e in enumerate(eps):
        msgs.append({"role": "assistant", "content": act(e["analysis"], e["plan"], e["commands"], e["complete"])})
        if i == len(eps) - 1:
            break
        if e["complete"]:
            msgs.append({"role": "user", "content": f"Current terminal state:\n{e['observation']}\n\n{CONFIRM}"})
        elif harness == "terminus_2":
            msgs.append({"role": "user", "content": "New Terminal Output:\n\n" + e["observation"]})
        else:
            msgs.append({"role": "user", "content": e["observation"]})
    return msgs, eps


MISTAKES = [
    ("I'll normalise whitespace in {f} first so the diff stays clean.",
     "sed -i 's/[ \\t]*$//' {f} && git diff --stat",
     " {f} | {n} {plus}{minus}\n 1 file changed, {n2} insertions(+), {n2} deletions(-)",
     "That touched {n} unrelated lines, which would pollute the fix. Reverting it.",
     "git checkout -- {f} && git status --short {f}", ""),
    ("Let me make the file writable for everyone to rule out permissions.",
     "chmod 666 {f} && ls -la {f}", "-rw-rw-rw- 1 root root {size} Jun 12 09:58 {f}",
     "Making it world-writable is the wrong fix and a security problem. Restoring the original mode.",
     "chmod 644 {f} && ls -la {f}", "-rw-r--r-- 1 root root {size} Jun 12 09:58 {f}"),
]
DIR_MISTAKE = ("Let me check the previous run's log in the app directory.",
               "tail -n 20 {d}/log/run.log", "tail: cannot open '{d}/log/run.log' for reading: No such file or directory",
               "Wrong path: there is no log/ directory there. I'll go back to the evidence I already have.", None, None)


def fmt_read(content):
    return "\n".join(f"{i:6d}\t{l}" for i, l in enumerate(content.rstrip("\n").split("\n"), 1))


def claude_record(scs, rng, task_id, uid, source, mistake=False, tools_as_string=False):
    """scs: list of scenarios; their rounds are concatenated (multi-round when > 1 round)."""
    rounds = [r for sc in scs for r in sc.rounds]
    base = scs[0]
    msgs = [{"role": "system", "content": CLAUDE_SYSTEM}]
    ws = f"Working directory: {base.cwd} on host {base.host}."
    if source.endswith("cross-ws"):
        ws += " Relevant workspaces: " + ", ".join(sorted({base.cwd, "/etc"})) + "."
    call_n = [0]

    def cid():
        call_n[0] += 1
        return "call_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(20))

    def tool_msg(c, id_):
        if c.kind == "read_file":
            out = fmt_read(c.output)
        else:
            out = c.output + (f"\n\nExit code: {c.rc}" if c.rc else "")
        return {"role": "tool", "tool_call_id": id_, "name": c.kind, "content": out}

    def emit(content, calls, train=True):
        tcs, tms = [], []
        for c in calls:
            i = cid()
            tcs.append({"id": i, "type": "function", "function": {"name": c.kind, "arguments": json.dumps(c.args, ensure_ascii=False)}})
            tms.append(tool_msg(c, i))
        m = {"role": "assistant", "content": content, "tool_calls": tcs}
        if not train:
            m["train"] = False
        msgs.append(m)
        msgs.extend(tms)

    mistake_at = None
    if mistake:
        mistake_at = (0, rng.randint(1, max(1, len(rounds[0].steps) - 1)))
    for ri, rnd in enumerate(rounds):
        req = rnd.request if ri else f"{rnd.request}\n\n{ws}"
        msgs.append({"role": "user", "content": req})
        for si, st in enumerate(rnd.steps):
            if mistake_at == (ri, si):
                f = base.mistake_file
                if f:
                    t = MISTAKES[rng.randrange(2)]
                    n = rng.randint(9, 40)
                    vals = dict(f=f, n=n, n2=n // 2, plus="+" * (n // 2), minus="-" * (n // 2), size=rng.randint(400, 4000))
                    emit(t[0].format(**vals), [bash(t[1].format(**vals), t[2].format(**vals))], train=False)
                    emit(t[3].format(**vals), [bash(t[4].format(**vals), t[5].format(**vals))])
                else:
                    t = DIR_MISTAKE
                    emit(t[0], [bash(t[1].format(d=base.cwd), t[2].format(d=base.cwd), rc=1)], train=False)
            roll = rng.random()
            text = st.say if st.say is not None else st.analysis
            if roll < 0.3:
                text = ""
            elif roll < 0.55:
                text = text.split(". ")[0].rstrip(".") + "."
            if len(st.calls) > 1 and rng.random() < 0.4:
                emit(text, st.calls[:1])
                for c in st.calls[1:]:
                    emit("", [c])
            else:
                emit(text, st.calls)
        msgs.append({"role": "assistant", "content": rnd.summary})
    tools = json.dumps(TOOLS) if tools_as_string else TOOLS
    return {"messages": msgs, "tools": tools,
            "metadata": {"task_id": task_id, "source_trajectory_uid": uid, "source": source}}


# =========================================================================== writers
def dump_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def build(fn, seed, long=False):
    return fn(random.Random(seed), long=long)


def write_sft_tool_calls():
    rng = random.Random(1001)
    rows = []
    # rollouts per task: 3 for the first ten scenarios, 2 for the last five -> 40 records, 15 task ids
    counts = [3] * 10 + [2] * 5
    multi_partner = {0: None, 1: 8, 4: 11, 7: 13, 9: 14, 12: 2}   # scenario -> follow-up scenario (multi-round)
    rec_i = 0
    for si, fn in enumerate(SCENARIOS):
        seed = 5000 + si * 17
        task_id = f"tu-{build(fn, seed).key}-{seed:05d}"
        uid = det_uuid(random.Random(seed))
        for k in range(counts[si]):
            long = (si == 2 and k == 2) or (si == 3 and k == 1)
            sc = build(fn, seed, long=long)
            scs = [sc]
            source = "terminal-universe-cross-ws" if sc.kind == "cross" else "terminal-universe-single-ws"
            if k == 1 and si in multi_partner:
                if multi_partner[si] is not None:
                    partner = build(SCENARIOS[multi_partner[si]], seed + 1)
                    partner.rounds[0].request = "Next task on the same machine: " + partner.rounds[0].request
                    scs.append(partner)
                    if si in (1, 9):   # three rounds
                        third = build(SCENARIOS[(multi_partner[si] + 3) % len(SCENARIOS)], seed + 2)
                        third.rounds[0].request = "One more: " + third.rounds[0].request
                        scs.append(third)
                source = "terminal-universe-multi-round"
            elif sc.kind != "cross" and len(sc.rounds) > 1:
                sc.rounds = sc.rounds[:1]
            mistake = (rec_i % 4 == 1)
            rows.append(claude_record(scs, rng, task_id, uid, source, mistake=mistake, tools_as_string=(rec_i % 3 == 2)))
            rec_i += 1
    dump_jsonl(os.path.join(ROOT, "sft", "agent_tool_calls.jsonl"), rows)
    return rows


def write_terminus_chat():
    rows = []
    for i in range(25):
        fn = SCENARIOS[i % len(SCENARIOS)]
        seed = 7000 + i * 31
        sc = build(fn, seed)
        msgs, _ = terminus_messages(sc, random.Random(seed), confirm=(i % 6 == 3))
        rows.append({"messages": msgs, "metadata": {"task_id": f"t2-{sc.key}-{seed:05d}", "source_trajectory_uid": det_uuid(random.Random(seed + 1)),
                                                    "source": "terminus-2", "harness": "terminus_2"}})
    dump_jsonl(os.path.join(ROOT, "sft", "terminus2_chat.jsonl"), rows)
    return rows


def write_pivots():
    rows = []
    rng = random.Random(4242)
    plan = [(SCENARIOS[i], "terminus_2") for i in range(12)] + [(SCENARIOS[12], "terminus_1"), (SCENARIOS[13], "terminus_1")]
    for ti, (fn, harness) in enumerate(plan):
        seed = 9000 + ti * 13
        sc = build(fn, seed)
        msgs, _ = terminus_messages(sc, random.Random(seed), harness=harness, confirm=(ti % 4 == 1))
        traj_uid = det_uuid(random.Random(seed + 7))
        base_uuid = det_uuid(random.Random(seed + 8))
        agent_idx = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        if harness == "terminus_1":
            picks = agent_idx[:3] if ti == len(plan) - 2 else agent_idx[:2]
        else:
            n = min(len(agent_idx), rng.choice([4, 4, 5]))
            picks = sorted(set([agent_idx[0]] + rng.sample(agent_idx[1:], n - 1)))
        for p in picks:
            turn = agent_idx.index(p)
            prefix = msgs[:p]
            row = {"responses_create_params": {"input": prefix},
                   "expected_answer": msgs[p]["content"],
                   "uuid": f"{base_uuid}-{turn + 1}",
                   "metadata": {"harness": harness, "category": "first_round" if len(prefix) == 1 else "others",
                                "source_trajectory_uid": traj_uid, "pivot_agent_turn_index": turn, "task": f"{sc.key}-{seed:05d}"},
                   "agent_ref": {"type": "responses_api_agents", "name": "terminus_judge_simple_agent"}}
            if len(rows) % 3 == 0:
                row["threshold"] = 0.95
                row = {k: row[k] for k in ["responses_create_params", "expected_answer", "uuid", "metadata", "threshold", "agent_ref"]}
            rows.append(row)
    dump_jsonl(os.path.join(ROOT, "pivot", "terminal_pivot.jsonl"), rows)
    return rows


def iso(t):
    return t.isoformat()


def write_harbor_job():
    jroot = os.path.join(ROOT, "harbor", "sample-job")
    if os.path.isdir(jroot):
        shutil.rmtree(jroot)
    os.makedirs(jroot)
    rng = random.Random(31337)
    model = "tr-sft-qwen3-8b-step1200"
    job_name = "2024-06-14__10-02-37"
    job_id = det_uuid(rng)
    t0 = datetime(2024, 6, 14, 10, 2, 37, 118000, tzinfo=timezone.utc)
    agent_kwargs = {"temperature": 0.6, "max_turns": 40, "model_info": {"max_input_tokens": 32768, "max_output_tokens": 4096,
                                                                        "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}}
    trials_spec = [(sc_csv_pipeline, 1.0, None), (sc_make, 1.0, None), (sc_git, 0.0, None),
                   (sc_nginx, 1.0, None), (sc_systemd, 0.0, "timeout")]
    trial_names, rewards, exc_trials = [], {}, []
    tot_in = tot_out = 0
    cur = t0
    for ti, (fn, reward, failure) in enumerate(trials_spec):
        seed = 12000 + ti * 7
        sc = build(fn, seed)
        task = sc.key
        tname = f"{task}__{rid(rng)}"
        trial_names.append(tname)
        tdir = os.path.join(jroot, tname)
        os.makedirs(os.path.join(tdir, "agent"))
        os.makedirs(os.path.join(tdir, "verifier"))
        eps = terminus_episodes(sc, rng, confirm=True)
        if failure == "timeout":
            eps = eps[:-3]
        prompt = T2_PROMPT.format(instruction=sc.rounds[0].request, terminal_state=initial_screen(sc))
        start = cur + timedelta(seconds=rng.uniform(20, 60))
        t = start + timedelta(seconds=rng.uniform(1, 3))
        steps = [{"step_id": 1, "timestamp": iso(t), "source": "user", "message": prompt}]
        ptoks = len(prompt) // 4
        total_p = total_c = 0
        api_ms = []
        for ep_i, e in enumerate(eps):
            content = t2_action(e["analysis"], e["plan"], e["commands"], e["complete"])
            ctoks = max(40, len(content) // 4 + rng.randint(-20, 60))
            t = t + timedelta(seconds=rng.uniform(2, 12) + sum(c["duration"] for c in e["commands"]))
            api_ms.append(round(rng.uniform(900, 9000), 1))
            tool_calls = [{"tool_call_id": f"call_{ep_i}_{j + 1}", "function_name": "bash_command",
                           "arguments": {"keystrokes": c["keystrokes"], "duration": c["duration"]}} for j, c in enumerate(e["commands"])]
            if e["complete"]:
                tool_calls.append({"tool_call_id": f"call_{ep_i}_task_complete", "function_name": "mark_task_complete", "arguments": {}})
            pending = e["complete"] and not (ep_i > 0 and eps[ep_i - 1]["complete"])
            obs_text = (f"Current terminal state:\n{e['observation']}\n\n{CONFIRM}" if pending else e["observation"])
            result = {"content": obs_text}
            if len(e["commands"]) == 1:
                result = {"source_call_id": f"call_{ep_i}_1", "content": obs_text}
            step = {"step_id": len(steps) + 1, "timestamp": iso(t), "source": "agent", "model_name": f"hosted_vllm/{model}",
                    "message": f"Analysis: {e['analysis']}\nPlan: {e['plan']}"}
            if tool_calls:
                step["tool_calls"] = tool_calls
            step["observation"] = {"results": [result]}
            step["metrics"] = {"prompt_tokens": ptoks, "completion_tokens": ctoks}
            steps.append(step)
            total_p += ptoks
            total_c += ctoks
            ptoks += ctoks + len(obs_text) // 4
        traj = {"schema_version": "ATIF-v1.8", "session_id": det_uuid(rng),
                "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": f"hosted_vllm/{model}",
                          "extra": {"parser": "json", "temperature": 0.6}},
                "steps": steps,
                "final_metrics": {"total_prompt_tokens": total_p, "total_completion_tokens": total_c, "total_cached_tokens": 0}}
        with open(os.path.join(tdir, "agent", "trajectory.json"), "w") as f:
            f.write(json.dumps(traj, indent=2, ensure_ascii=False))
        agent_end = t + timedelta(seconds=rng.uniform(0.5, 2))
        exc = None
        if failure == "timeout":
            agent_end = start + timedelta(seconds=900)
            exc = {"exception_type": "AgentTimeoutError", "exception_message": "Agent execution timed out after 900.0 seconds",
                   "exception_traceback": "Traceback (most recent call last):\n  File \"/usr/lib/python3.12/asyncio/tasks.py\", line 520, in wait_for\n    return await fut\n           ^^^^^^^^^\nasyncio.exceptions.CancelledError\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n  File \".../harbor/trial/trial.py\", line 412, in _execute_agent\n    await asyncio.wait_for(\n  File \"/usr/lib/python3.12/asyncio/tasks.py\", line 519, in wait_for\n    async with timeouts.timeout(timeout):\n  File \"/usr/lib/python3.12/asyncio/timeouts.py\", line 115, in __aexit__\n    raise TimeoutError from exc_val\nTimeoutError\n\nThe above exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n  File \".../harbor/trial/trial.py\", line 430, in _execute_agent\n    raise AgentTimeoutError(\nharbor.trial.trial.AgentTimeoutError: Agent execution timed out after 900.0 seconds\n",
                   "occurred_at": iso(agent_end)}
            exc_trials.append(tname)
            with open(os.path.join(tdir, "exception.txt"), "w") as f:
                f.write(exc["exception_traceback"])
        ver_end = agent_end + timedelta(seconds=rng.uniform(4, 20))
        with open(os.path.join(tdir, "verifier", "reward.txt"), "w") as f:
            f.write(f"{int(reward)}\n")
        with open(os.path.join(tdir, "verifier", "test-stdout.txt"), "w") as f:
            f.write(f"+ pytest -q /tests/test_outputs.py\n{'.' * 4 if reward else '..F.'}\n{'4 passed' if reward else '1 failed, 3 passed'} in {rng.uniform(0.5, 3):.2f}s\n")
        rewards.setdefault(float(reward), []).append(tname)
        tot_in += total_p
        tot_out += total_c
        res = {"id": det_uuid(rng), "task_name": task, "trial_name": tname,
               "trial_uri": f"file:///home/ci/terminal-recipes/jobs/{job_name}/{tname}",
               "task_id": {"path": f"tasks/{task}"}, "source": "terminal-recipes-samples",
               "task_checksum": "".join(rng.choice("0123456789abcdef") for _ in range(64)),
               "config": {"task": {"path": f"tasks/{task}", "source": "terminal-recipes-samples"}, "trial_name": tname,
                          "trials_dir": f"jobs/{job_name}", "timeout_multiplier": 1.0,
                          "agent": {"name": "terminus-2", "model_name": f"hosted_vllm/{model}", "kwargs": agent_kwargs},
                          "environment": {"type": "docker", "force_build": False, "delete": True},
                          "verifier": {"disable": False}, "job_id": job_id},
               "agent_info": {"name": "terminus-2", "version": "2.0.0", "model_info": {"name": model, "provider": "hosted_vllm"}},
               "agent_result": {"n_input_tokens": total_p, "n_cache_tokens": 0, "n_output_tokens": total_c, "cost_usd": None,
                                "metadata": {"n_episodes": len(eps), "api_request_times_msec": api_ms, "summarization_count": 0}},
               "verifier_result": {"rewards": {"reward": float(reward)}},
               "exception_info": exc,
               "started_at": iso(start), "finished_at": iso(ver_end + timedelta(seconds=1.3)),
               "environment_setup": {"started_at": iso(start), "finished_at": iso(start + timedelta(seconds=0.9))},
               "agent_setup": {"started_at": iso(start + timedelta(seconds=0.9)), "finished_at": iso(start + timedelta(seconds=1.4))},
               "agent_execution": {"started_at": iso(start + timedelta(seconds=1.4)), "finished_at": iso(agent_end)},
               "verifier": {"started_at": iso(agent_end + timedelta(seconds=0.2)), "finished_at": iso(ver_end)}}
        with open(os.path.join(tdir, "result.json"), "w") as f:
            f.write(json.dumps(res, indent=4, ensure_ascii=False))
        cur = start
    finished = cur + timedelta(seconds=960)
    ev = f"terminus-2__{model}__adhoc"
    n = len(trials_spec)
    job_res = {"id": job_id, "started_at": iso(t0), "updated_at": iso(finished), "finished_at": iso(finished), "n_total_trials": n,
               "stats": {"n_completed_trials": n, "n_errored_trials": len(exc_trials), "n_running_trials": 0, "n_pending_trials": 0,
                         "n_cancelled_trials": 0, "n_retries": 0,
                         "evals": {ev: {"n_trials": n, "n_errors": len(exc_trials),
                                        "metrics": [{"mean": round(sum(r for _, r, _ in trials_spec) / n, 4)}],
                                        "pass_at_k": {}, "reward_stats": {"reward": {str(k): v for k, v in sorted(rewards.items())}},
                                        "exception_stats": {"AgentTimeoutError": exc_trials} if exc_trials else {}}},
                         "n_input_tokens": tot_in, "n_cache_tokens": 0, "n_output_tokens": tot_out, "cost_usd": None}}
    with open(os.path.join(jroot, "result.json"), "w") as f:
        f.write(json.dumps(job_res, indent=4))
    cfg = {"job_name": job_name, "jobs_dir": "jobs", "n_attempts": 1, "timeout_multiplier": 1.0, "agent_timeout_multiplier": None,
           "debug": False, "n_concurrent_trials": 4, "quiet": False,
           "retry": {"max_retries": 0, "include_exceptions": None, "exclude_exceptions": ["AgentTimeoutError", "VerifierTimeoutError"],
                     "wait_multiplier": 1.0, "min_wait_sec": 1.0, "max_wait_sec": 60.0},
           "environment": {"type": "docker", "force_build": False, "delete": True},
           "verifier": {"disable": False},
           "metrics": [],
           "agents": [{"name": "terminus-2", "model_name": f"hosted_vllm/{model}", "kwargs": agent_kwargs}],
           "datasets": [{"path": "tasks", "task_names": [fn(random.Random(0)).key for fn, _, _ in trials_spec]}],
           "tasks": []}
    with open(os.path.join(jroot, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=4))
    return trial_names


def write_terminus_conversations():
    """OpenThoughts-Agent SFT rows (Terminus-2 trials exported by Harbor): `conversations` of {content, role}
    plus the trial's metadata as top-level columns; two trials are also exported at an earlier episode."""
    rows = []
    rng = random.Random(15151)
    model = "hosted_vllm/tr-sft-qwen3-8b-step1200"
    run_id = det_uuid(rng)
    day = datetime(2024, 6, 20, 8, 0, 0, tzinfo=timezone.utc)
    for i in range(8):
        seed = 15000 + i * 19
        sc = build(SCENARIOS[(i * 2) % len(SCENARIOS)], seed)
        msgs, _ = terminus_messages(sc, random.Random(seed), confirm=(i % 3 == 1))
        trial = f"{sc.key}__{rid(rng)}"
        ends = [len(msgs)] + ([len(msgs) - 4] if i in (0, 5) else [])
        for end in ends:
            conv = [{"content": m["content"], "role": m["role"]} for m in msgs[:end]]
            day += timedelta(seconds=rng.uniform(30, 900))
            rows.append({"conversations": conv, "agent": "terminus-2", "model": model, "model_provider": "hosted_vllm",
                         "date": day.isoformat(), "task": sc.key,
                         "episode": f"episode-{sum(m['role'] == 'assistant' for m in conv) - 1}",
                         "run_id": run_id, "trial_name": trial, "result": None})
    dump_jsonl(os.path.join(ROOT, "sft", "terminus2_conversations.jsonl"), rows)
    return rows


def sharegpt_record(sc, rng, style):
    """A scenario as ShareGPT turns. style 0: LLaMA-Factory names (human, gpt, function_call, observation) and its
    `system` and `tools` columns; style 1: user/assistant/tool names and the system prompt as the first turn."""
    names = (["human", "gpt", "function_call", "observation"] if style == 0 else ["user", "assistant", "function_call", "tool"])
    conv = [] if style == 0 else [{"from": "system", "value": CLAUDE_SYSTEM}]
    rnd = sc.rounds[0]
    conv.append({"from": names[0], "value": f"{rnd.request}\n\nWorking directory: {sc.cwd} on host {sc.host}."})
    for st in rnd.steps:
        for c in st.calls:
            conv.append({"from": names[2], "value": json.dumps({"name": c.kind, "arguments": c.args}, ensure_ascii=False)})
            out = fmt_read(c.output) if c.kind == "read_file" else c.output + (f"\n\nExit code: {c.rc}" if c.rc else "")
            conv.append({"from": names[3], "value": out})
    conv.append({"from": names[1], "value": rnd.summary})
    tools = json.dumps([t["function"] for t in TOOLS], ensure_ascii=False)
    return {"conversations": conv, "system": CLAUDE_SYSTEM, "tools": tools} if style == 0 else {"conversations": conv, "tools": tools}


def write_sharegpt():
    rows = []
    for i in range(8):
        seed = 16000 + i * 23
        sc = build(SCENARIOS[(i * 2 + 1) % len(SCENARIOS)], seed)
        rows.append(sharegpt_record(sc, random.Random(seed), style=0 if i % 4 else 1))
    dump_jsonl(os.path.join(ROOT, "sft", "sharegpt_tool_calls.jsonl"), rows)
    return rows


def write_swe_json_strings():
    """SWE-trajectory-set rows: `messages` as one JSON string, `tools` as a list of JSON strings (one row in three:
    the whole list as one JSON string), and the run's ids as top-level columns."""
    rows = []
    rng = random.Random(17171)
    for i in range(6):
        seed = 17000 + i * 29
        sc = build(SCENARIOS[(i * 3 + 2) % len(SCENARIOS)], seed)
        rec = claude_record([sc], rng, f"tu-{sc.key}", "", "swe")
        tools = json.dumps(TOOLS) if i % 3 == 2 else [json.dumps(t) for t in TOOLS]
        rows.append({"instance_id": f"{sc.key}-{seed:05d}", "model": "tr-sft-qwen3-8b-step1200",
                     "traj_id": f"{sc.key}-{seed:05d}.{hexid(rng, 8)}", "resolved": i % 5 != 4,
                     "messages": json.dumps(rec["messages"], ensure_ascii=False), "tools": tools})
    dump_jsonl(os.path.join(ROOT, "sft", "swe_json_strings.jsonl"), rows)
    return rows


def main():
    a = write_sft_tool_calls()
    b = write_terminus_chat()
    c = write_pivots()
    d = write_harbor_job()
    e = write_terminus_conversations()
    f = write_sharegpt()
    g = write_swe_json_strings()
    print(f"agent_tool_calls: {len(a)}  terminus2_chat: {len(b)}  terminal_pivot: {len(c)}  harbor trials: {len(d)}  "
          f"terminus2_conversations: {len(e)}  sharegpt_tool_calls: {len(f)}  swe_json_strings: {len(g)}")


if __name__ == "__main__":
    main()
