"""Deep families over data files: a CSV column found by its header, a request traced across logs, a join over files.
Runs in: any Python >= 3.11, standard library only.

The instruction names the column, the level or the item; which file holds it, where, and what it joins to is the
world's. Each policy types the file, the column number and the values it read.
"""

from __future__ import annotations

import json
import random
import re

from harbor_tasks.families.deep_files import NAMES, SHOW
from harbor_tasks.families.instance import WORDS, Family, Instance, file_is, found, lines, number_is, q

COLUMNS = ["id", "region", "team", "day", "status", "owner", "batch", "kind", "host", "zone"]
METRICS = ["amount", "bytes", "duration_ms", "retries", "units", "errors"]
CITIES = ["Lisbon", "Oslo", "Tartu", "Porto", "Lyon", "Gdansk", "Leeds", "Turin", "Graz", "Ghent", "Malmo", "Brno"]
# each family's commands, written once: the task's solution lists them with the world's values, the teacher types
# them with the values it read (SHOW: deep_files')
CSV_FIND = "grep -l {metric} exports/*.csv".format
CSV_COLUMN = "head -n 1 {target} | tr , '\\n' | grep -nx {metric}".format
CSV_SUM = "awk -F, 'NR > 1 {{s += ${column}}} END {{print s}}' {target} > {out}".format
TRACE_LEVEL = "grep {} logs/service.log".format
TRACE_REQUEST = "grep req={} logs/gateway.log".format
TRACE_WRITE = "echo {ip} > {out}.txt".format
JOIN_FIND = "grep -l {} inventory/*.json".format
JOIN_ITEM = "grep {sku} {shelf}".format
JOIN_HOUSE = "grep ^{}, warehouses.csv".format
JOIN_WRITE = "echo {} > city.txt".format


# ------------------------------------------------------------------------------------------------------ csv-header
def ask_csv(rng: random.Random) -> dict:
    return {"metric": rng.choice(METRICS), "out": rng.choice(["total", "sum", "result"]) + ".txt"}


def build_csv(asked: dict, rng: random.Random) -> Instance:
    metric, out = asked["metric"], asked["out"]
    names = [f"exports/{w}.csv" for w in rng.sample(WORDS, rng.randint(3, 4))]
    target = rng.choice(names)
    files, total, column = {}, 0, 0
    for name in names:
        header = rng.sample(COLUMNS, rng.randint(3, 5))
        others = [m for m in METRICS if m != metric]
        if name == target:
            column = rng.randint(1, len(header) + 1)
            header.insert(column - 1, metric)
        else:
            header.insert(rng.randint(0, len(header)), rng.choice(others))
        rows = []
        for _ in range(rng.randint(5, 12)):
            row = [str(rng.randint(0, 999)) if h in METRICS else f"{rng.choice(WORDS)}{rng.randint(1, 9)}"
                   for h in header]
            rows.append(",".join(row))
            if name == target:
                total += int(row[column - 1])
        files[name] = lines(",".join(header), *rows)
    return Instance(
        instruction=f"One of the CSV files in `/app/exports/` (comma-separated, a header line, no quoting) has a "
                    f"column named `{metric}`. Write the sum of that column over all its rows, as a plain integer "
                    f"followed by a newline, to `/app/{out}`.",
        files=files, solve=[CSV_FIND(metric=metric), CSV_COLUMN(target=target, metric=metric),
                            CSV_SUM(column=column, target=target, out=out), SHOW(out)],
        checks=[number_is(out, total)], category="data-processing")


def teach_csv(asked: dict):
    # one value read per look, the one the screen shows (the file, then the column's number), as a model would:
    # picking a file among several headers and counting its commas by eye are two reads in one; the sum is
    # computed into the file, not read off the screen and typed back
    metric, out = asked["metric"], asked["out"]
    where = yield CSV_FIND(metric=metric)
    target = found(r"^(exports/\S+\.csv)$", where, f"file with {metric}").group(1)
    numbered = yield CSV_COLUMN(target=target, metric=metric)
    column = found(rf"^(\d+):{re.escape(metric)}$", numbered, f"column number of {metric}").group(1)
    yield CSV_SUM(column=column, target=target, out=out)
    found(r"^(-?\d+)$", (yield SHOW(out)), "sum")


# ------------------------------------------------------------------------------------------------------- log-trace
def ask_trace(rng: random.Random) -> dict:
    return {"level": rng.choice(["FATAL", "PANIC", "CRITICAL"]), "out": rng.choice(["client", "culprit", "source"])}


def _request_id(rng: random.Random) -> str:
    return "".join(rng.choice("abcdef0123456789") for _ in range(10))


def build_trace(asked: dict, rng: random.Random) -> Instance:
    level, out = asked["level"], asked["out"] + ".txt"
    ids = list(dict.fromkeys(_request_id(rng) for _ in range(30)))[:24]
    bad = rng.choice(ids)
    ips = {i: f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}" for i in ids}
    service = []
    for n, rid in enumerate(ids):
        lvl = level if rid == bad else rng.choice(["INFO", "INFO", "WARN", "ERROR", "DEBUG"])
        msg = (f"worker {rng.randint(1, 8)} crashed: {rng.choice(['segfault', 'out of memory', 'abort'])}"
               if rid == bad else f"{rng.choice(['GET', 'POST', 'PUT'])} /{rng.choice(WORDS)} handled")
        service.append(f"2026-11-{rng.randint(10, 28)}T10:{n:02d}:{rng.randint(10, 59)}Z {lvl} req={rid} {msg}")
    gateway = [f"{ips[rid]} - - \"{rng.choice(['GET', 'POST'])} /{rng.choice(WORDS)}\" "
               f"{rng.choice([200, 201, 404, 500])} req={rid}" for rid in rng.sample(ids, len(ids))]
    return Instance(
        instruction=f"`/app/logs/service.log` has exactly one line at level `{level}`. Find the request id "
                    f"(`req=...`) on that line, find the request with that id in `/app/logs/gateway.log`, and write "
                    f"the client IP address of that request (just the address, followed by a newline) to `/app/{out}`.",
        files={"logs/service.log": lines(*service), "logs/gateway.log": lines(*gateway)},
        solve=[TRACE_LEVEL(level), TRACE_REQUEST(bad), TRACE_WRITE(ip=ips[bad], out=asked["out"])],
        checks=[file_is(out, ips[bad] + "\n")], category="log-analysis")


def teach_trace(asked: dict):
    line = yield TRACE_LEVEL(asked["level"])
    rid = found(r"req=([0-9a-f]{10})", line, "request id").group(1)
    hit = yield TRACE_REQUEST(rid)
    ip = found(r"^(\d+\.\d+\.\d+\.\d+) ", hit, "client address").group(1)
    yield TRACE_WRITE(ip=ip, out=asked["out"])


# ------------------------------------------------------------------------------------------------------- json-join
def ask_join(rng: random.Random) -> dict:
    return {"sku": f"SKU-{rng.randint(10000, 99999)}"}


def build_join(asked: dict, rng: random.Random) -> Instance:
    sku = asked["sku"]
    houses = {f"W{n}": (f"{rng.choice(WORDS)} depot", city) for n, city in
              zip(rng.sample(range(10, 99), 8), rng.sample(CITIES, 8))}
    shelves = [f"inventory/{w}.json" for w in rng.sample(WORDS, rng.randint(3, 5))]
    target, house = rng.choice(shelves), rng.choice(list(houses))
    skus = {f"SKU-{rng.randint(10000, 99999)}" for _ in range(40)} - {sku}
    files, pool = {}, sorted(skus)
    rng.shuffle(pool)
    for shelf in shelves:
        items = [{"sku": pool.pop(), "warehouse": rng.choice(list(houses)), "qty": rng.randint(0, 90)}
                 for _ in range(rng.randint(3, 6))]
        if shelf == target:
            items.insert(rng.randint(0, len(items)), {"sku": sku, "warehouse": house, "qty": rng.randint(1, 90)})
        files[shelf] = "[\n" + ",\n".join("  " + json.dumps(item) for item in items) + "\n]\n"
    files["warehouses.csv"] = lines("id,name,city", *(f"{w},{n},{c}" for w, (n, c) in houses.items()))
    city = houses[house][1]
    return Instance(
        instruction=f"Item `{sku}` is listed in one of the JSON files under `/app/inventory/`, with the id of the "
                    f"warehouse that stocks it. Look that warehouse up in `/app/warehouses.csv` and write its city "
                    f"(just the city, followed by a newline) to `/app/city.txt`.",
        files=files,
        solve=[JOIN_FIND(sku), JOIN_ITEM(sku=sku, shelf=target), JOIN_HOUSE(house), JOIN_WRITE(city)],
        checks=[file_is("city.txt", city + "\n")], category="data-processing")


def teach_join(asked: dict):
    sku = asked["sku"]
    where = yield JOIN_FIND(sku)
    shelf = found(r"^(inventory/\S+\.json)$", where, "file of the item").group(1)
    item = yield JOIN_ITEM(sku=sku, shelf=shelf)
    house = found(r'"warehouse": "(W\d+)"', item, "warehouse id").group(1)
    row = yield JOIN_HOUSE(house)
    city = found(rf"^{house},[^,]*,(\w+)$", row, "warehouse row").group(1)
    yield JOIN_WRITE(city)


FAMILIES = (
    Family("csv-header", "deep", "find which CSV in /app/exports has a named column, and where; write its sum",
           build_csv, ask_csv, teach_csv),
    Family("log-trace", "deep", "take the request id of a log's one FATAL-level line; find its client IP in a 2nd log",
           build_trace, ask_trace, teach_trace),
    Family("json-join", "deep", "find an item's warehouse id in JSON files; look its city up in a CSV",
           build_join, ask_join, teach_join),
)
