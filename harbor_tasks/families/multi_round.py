"""Multi-round families (EvoCode style): three rounds on one workspace, each adding or changing a requirement.
Runs in: any Python >= 3.11, standard library only.

Each round is a Harbor step (steps/round-N: its request, its verifier, the teacher's commands); a round's verifier
runs the cases still in force (a later round's change replaces the earlier case it contradicts) and prints one
`PASS|FAIL <case>` line each and `CASE_SUMMARY`. The answers live in the world: a column's place, a setting's line.
"""

from __future__ import annotations

import random

from harbor_tasks.families.instance import (WORDS, Case, Family, Fixes, Instance, Round, file_is, fix_until_it_runs,
                                            fixes_in_order, found, lines, number_is, q)

# ----------------------------------------------------------------------------------------------------- orders-rounds
STATUSES = ["paid", "pending", "refunded", "shipped"]
COLUMNS = ["id", "customer", "status", "amount", "region", "channel"]
# each family's commands, written once: the rounds' solutions list them with the world's values, the teacher types
# them with the values it read
ORDERS_HEADER = "head -n 1 data/orders.csv"
MAKE_REPORT = "mkdir -p report"
WRITE_COUNT = "echo {} > report/count.txt".format
WRITE_TOTAL = "echo {} > report/total.txt".format


def orders_commands(col: dict[str, int], status: str, test: str) -> tuple[str, str, str]:
    """The count, total and drop commands of orders-rounds, with the columns numbered as the header has them."""
    s, a, c = col["status"], col["amount"], col["customer"]
    return (f"awk -F, 'NR > 1 && ${s} == \"{status}\"' data/orders.csv | wc -l",
            f"awk -F, 'NR > 1 && ${s} == \"{status}\" {{t += ${a}}} END {{print t + 0}}' data/orders.csv",
            f"awk -F, 'NR == 1 || ${c} != \"{test}\"' data/orders.csv > data/orders.new && "
            "mv data/orders.new data/orders.csv")


def ask_orders(rng: random.Random) -> dict:
    customers = rng.sample(WORDS, 2)
    return {"status": rng.choice(STATUSES), "test_customer": customers[0]}


def build_orders(asked: dict, rng: random.Random) -> Instance:
    status, test = asked["status"], asked["test_customer"]
    header = rng.sample(COLUMNS, len(COLUMNS))
    col = {name: header.index(name) + 1 for name in header}
    customers = [w for w in rng.sample(WORDS, 6) if w != test][:5]
    rows = []
    for n in range(rng.randint(12, 22)):
        row = {"id": f"o{1000 + n}", "customer": rng.choice(customers), "status": rng.choice(STATUSES),
               "amount": str(rng.randint(5, 900)), "region": rng.choice(["north", "south", "east", "west"]),
               "channel": rng.choice(["web", "shop", "phone"])}
        rows.append(row)
    for _ in range(rng.randint(2, 3)):  # the test customer's orders, one at least of the asked status
        rows.insert(rng.randrange(len(rows) + 1), {
            "id": f"o{2000 + len(rows)}", "customer": test, "status": status if not any(
                r["customer"] == test and r["status"] == status for r in rows) else rng.choice(STATUSES),
            "amount": str(rng.randint(5, 900)), "region": "north", "channel": "web"})
    rows.append({"id": "o3000", "customer": rng.choice(customers), "status": status, "amount": str(rng.randint(5, 900)),
                 "region": "east", "channel": "shop"})

    def text(rs):
        return lines(",".join(header), *(",".join(r[h] for h in header) for r in rs))

    def count(rs):
        return sum(r["status"] == status for r in rs)

    def total(rs):
        return sum(int(r["amount"]) for r in rs if r["status"] == status)

    kept = [r for r in rows if r["customer"] != test]
    count_cmd, total_cmd, drop_cmd = orders_commands(col, status, test)
    r1_count = Case("count", number_is("report/count.txt", count(rows)),
                    f"report/count.txt should hold how many orders are {status}, and it doesn't")
    r2_total = Case("total", number_is("report/total.txt", total(rows)),
                    f"report/total.txt should hold the total amount of the {status} orders, and it doesn't")
    r3 = [Case("rows", file_is("data/orders.csv", text(kept)),
               f"data/orders.csv should keep every row but {test}'s, header first, as they were"),
          Case("count", number_is("report/count.txt", count(kept)),
               f"report/count.txt should count the {status} orders without {test}'s"),
          Case("total", number_is("report/total.txt", total(kept)),
               f"report/total.txt should total the {status} orders without {test}'s")]
    rounds = [
        Round(f"`/app/data/orders.csv` lists orders (comma-separated, a header line, no quoting). Write the number of "
              f"orders whose status is `{status}` to `/app/report/count.txt` (create `/app/report/`), as a plain "
              f"number followed by a newline.",
              [ORDERS_HEADER, count_cmd, MAKE_REPORT, WRITE_COUNT(count(rows))],
              [r1_count]),
        Round(f"Next: also write the total `amount` of the orders whose status is `{status}` to "
              f"`/app/report/total.txt`, as a plain number followed by a newline. Keep `/app/report/count.txt` right.",
              [ORDERS_HEADER, total_cmd, WRITE_TOTAL(total(rows))], [r1_count, r2_total]),
        Round(f"Change: the orders of customer `{test}` were test data. Delete their rows from `/app/data/orders.csv` "
              f"(keep the header and every other row as it is), then make `/app/report/count.txt` and "
              f"`/app/report/total.txt` match what is left.",
              [ORDERS_HEADER, drop_cmd, count_cmd, WRITE_COUNT(count(kept)), total_cmd, WRITE_TOTAL(total(kept))],
              r3),
    ]
    return Instance(instruction=rounds[0].instruction, files={"data/orders.csv": text(rows)}, solve=[], checks=[],
                    category="data-processing", rounds=rounds)


def _columns(header: str) -> dict[str, int]:
    names = found(r"^(\w+(?:,\w+)+)$", header, "header line").group(1).split(",")
    return {name: i + 1 for i, name in enumerate(names)}


def teach_orders(asked: dict, round_index: int):
    status, test = asked["status"], asked["test_customer"]
    count_cmd, total_cmd, drop_cmd = orders_commands(_columns((yield ORDERS_HEADER)), status, test)
    if round_index == 2:
        yield drop_cmd
    if round_index in (0, 2):
        counted = found(r"^(\d+)$", (yield count_cmd), "count").group(1)
        if round_index == 0:
            yield MAKE_REPORT
        yield WRITE_COUNT(counted)
    if round_index in (1, 2):
        summed = found(r"^(\d+)$", (yield total_cmd), "total").group(1)
        yield WRITE_TOTAL(summed)


# ---------------------------------------------------------------------------------------------------- service-rounds
SERVICE_RUN = "bash svc/run.sh"
SERVICE_CONF = "svc/{}.conf".format
SERVICE_LOG = "logs/{}.log".format
# each problem's error as the start check prints it and its fix
SERVICE_FIXES: Fixes = {"spool": (r"spool directory (\S+) does not exist", "mkdir -p {0}"),
                 "lock": (r"lock file (\S+) exists", "rm {0}")}
LOOK_UP = "grep -n {what} {conf}".format
SET_PORT = "sed -i 's/^port = {old}$/port = {new}/' {conf}".format
MOVE_LOG = ("mkdir -p logs", "cp {old} {new}", "sed -i 's#^log = {old}$#log = {new}#' {conf}")


def ask_service(rng: random.Random) -> dict:
    return {"name": rng.choice(["ledger", "relay", "indexer", "mailer", "scheduler"]), "port": rng.randint(8100, 8999)}


def build_service(asked: dict, rng: random.Random) -> Instance:
    name, port = asked["name"], asked["port"]
    old_port = rng.choice([p for p in range(8000, 8099)])
    old_log = f"var/{rng.choice(['log', 'tmp', 'run'])}/{name}-{rng.randint(1, 9)}.log"
    spool = f"var/spool/{rng.choice(WORDS)}"
    lock = f"run/{name}.pid"
    problems = rng.sample(["spool", "lock"], rng.randint(1, 2))
    guards = {"spool": f'[ -d {spool} ] || fail "spool directory {spool} does not exist (create it)"',
              "lock": f'[ ! -e {lock} ] || fail "lock file {lock} exists: a previous run did not finish; remove it"'}
    script = lines("#!/bin/bash", f"# {name}: checks its setup and reports where it would listen",
                   'cd "$(dirname "$0")/.."',
                   'fail() { echo "error: $1" >&2; exit 1; }', f"conf={SERVICE_CONF(name)}",
                   *(guards[p] for p in problems),
                   "port=$(sed -n 's/^port = //p' \"$conf\")", "log=$(sed -n 's/^log = //p' \"$conf\")",
                   '[ -n "$log" ] && [ -d "$(dirname "$log")" ] || fail "log folder of $log does not exist"',
                   'echo "started on $port" >> "$log"', 'echo "ready on $port"')
    conf = SERVICE_CONF(name)
    conf_before = lines(f"# {name}", f"port = {old_port}", f"log = {old_log}", f"workers = {rng.randint(2, 8)}")
    old_lines = [f"started on {old_port}" for _ in range(rng.randint(1, 3))]
    files = {f"svc/run.sh": script, conf: conf_before, old_log: lines(*old_lines), lock: "4242\n"}
    if "lock" not in problems:
        del files[lock]
    run = SERVICE_RUN
    r1 = Case("runs", f"bash svc/run.sh 2>/dev/null | grep -qx 'ready on [0-9]*'",
              "bash svc/run.sh still doesn't print that it's ready")
    r2 = Case("port", f"grep -qx 'port = {port}' {conf} && bash svc/run.sh 2>/dev/null | grep -qx 'ready on {port}'",
              f"the service should be on port {port} (port = {port} in {conf}), and it isn't")
    r3 = [Case("log", f"grep -qx 'log = logs/{name}.log' {conf} && [ \"$(head -n {len(old_lines)} logs/{name}.log)\" = "
                      f"{q(chr(10).join(old_lines))} ]",
               f"the log should be logs/{name}.log (log = logs/{name}.log in {conf}), its old lines first"),
          Case("port", r2.check, r2.says), Case("unchanged", file_is("svc/run.sh", script),
                                                "svc/run.sh itself should not change")]
    fix_solve = fixes_in_order(run, SERVICE_FIXES, problems, {"spool": (spool,), "lock": (lock,)})
    new_log = SERVICE_LOG(name)
    rounds = [
        Round(f"`bash /app/svc/run.sh` (the {name} service's start check) fails. Find out why from what it prints and "
              f"fix what it needs in its environment (not the script) until it prints `ready on` its port.",
              fix_solve + [run], [r1, Case("unchanged", r3[2].check, r3[2].says)]),
        Round(f"Next: the {name} service must listen on port {port}. Change its config (the `port = ` line of its "
              f".conf file under `/app/svc/`) so that `bash /app/svc/run.sh` prints `ready on {port}`.",
              [LOOK_UP(what="port", conf=conf), SET_PORT(old=old_port, new=port, conf=conf), run],
              [r2, Case("unchanged", r3[2].check, r3[2].says)]),
        Round(f"Change: the {name} service's log moves to `/app/logs/{name}.log`. Set its config's `log = ` line to "
              f"`logs/{name}.log`, create `/app/logs/`, and start the new log with the old log's lines (copy them "
              f"over) before running `bash /app/svc/run.sh` again.",
              [LOOK_UP(what="log", conf=conf), *(step.format(old=old_log, new=new_log, conf=conf) for step in MOVE_LOG),
               run], r3),
    ]
    return Instance(instruction=rounds[0].instruction, files=files, solve=[], checks=[], category="debugging",
                    rounds=rounds)


def teach_service(asked: dict, round_index: int):
    name, port = asked["name"], asked["port"]
    run, conf = SERVICE_RUN, SERVICE_CONF(name)
    if round_index == 0:
        yield from fix_until_it_runs(run, SERVICE_FIXES, r"^ready on \d+$")
        return
    if round_index == 1:
        old = found(r"^\d+:port = (\d+)$", (yield LOOK_UP(what="port", conf=conf)), "port line").group(1)
        yield SET_PORT(old=old, new=port, conf=conf)
        found(rf"^ready on {port}$", (yield run), "ready line on the new port")
        return
    old = found(r"^\d+:log = (\S+)$", (yield LOOK_UP(what="log", conf=conf)), "log line").group(1)
    for step in MOVE_LOG:
        yield step.format(old=old, new=SERVICE_LOG(name), conf=conf)
    yield run


FAMILIES = (
    Family("orders-rounds", "multi-round", "three rounds on an orders CSV: count, total, then drop a customer's rows "
           "and recount", build_orders, ask_orders, teach_orders),
    Family("service-rounds", "multi-round", "three rounds on a service: fix its start, change its port, move its log",
           build_service, ask_service, teach_service),
)
