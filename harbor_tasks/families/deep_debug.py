"""Deep families that fail and say why only when run: a script that stops at what its environment lacks, failing tests.
Runs in: any Python >= 3.11, standard library only (the tasks run bash and python3).

Each run names one problem (the first it meets); the world decides which problems there are and where, so the policy
runs, reads the error, fixes what it names, and runs again until the run succeeds.
"""

from __future__ import annotations

import random
import re

from harbor_tasks.families.instance import (WORDS, Family, Fixes, Instance, file_is, fix_until_it_runs, fixes_in_order,
                                            found, lines, q)

# ------------------------------------------------------------------------------------------------- failing-script
SCRIPTS = ["report", "backup", "sync", "rotate", "export", "digest"]
SETTINGS = ["retention_days", "max_files", "batch_size", "keep_copies", "timeout_sec"]
SCRIPT_RUN = "bash bin/{}.sh".format
# each problem's error as the script prints it and its fix: the teacher reads the one, the task's solution types the
# other with the world's values
FIXES: Fixes = {"dir": (r"output directory (\S+) does not exist", "mkdir -p {0}"),
         "lock": (r"lock file (\S+) exists", "rm {0}"), "mode": (r"(\S+) must have mode (\d+)", "chmod {1} {0}"),
         "key": (r"(\S+) has no (\w+)= line; set it to (\S+)", "echo {1}={2} >> {0}")}


def ask_script(rng: random.Random) -> dict:
    return {"script": rng.choice(SCRIPTS)}


def build_script(asked: dict, rng: random.Random) -> Instance:
    name = asked["script"]
    out_dir = f"var/{rng.choice(['spool', 'out', 'archive', 'reports'])}/{rng.choice(WORDS)}"
    lock = f"run/{name}-{rng.randint(10, 99)}.lock"
    secret = f"etc/{rng.choice(WORDS)}.secret"
    conf = f"etc/{name}.conf"
    key, value = rng.choice(SETTINGS), rng.randint(2, 60)
    problems = ["dir"] + rng.sample(["lock", "mode", "key"], rng.randint(1, 2))
    rng.shuffle(problems)
    guards = {
        "dir": f'[ -d {out_dir} ] || fail "output directory {out_dir} does not exist (create it)"',
        "lock": f'[ ! -e {lock} ] || fail "lock file {lock} exists: a previous run did not finish; remove it"',
        "mode": f'[ "$(stat -c %a {secret})" = 600 ] || fail "{secret} must have mode 600, not $(stat -c %a {secret})"',
        "key": f'grep -q "^{key}=" {conf} || fail "{conf} has no {key}= line; set it to {value}"',
    }
    caught = {"dir": (out_dir,), "lock": (lock,), "mode": (secret, 600), "key": (conf, key, value)}
    report = f"{out_dir}/{name}.txt"
    script = lines("#!/bin/bash", f"# {name}: writes a summary of data/input.txt", 'cd "$(dirname "$0")/.."',
                   'fail() { echo "error: $1" >&2; exit 1; }', *(guards[p] for p in problems),
                   f'echo "{name}: $(wc -l < data/input.txt) records" > {report}', f'echo "done: wrote {report}"')
    conf_text = lines(f"# {name} settings", f"source = data/input.txt", f"owner = {rng.choice(WORDS)}")
    records = [f"{rng.choice(WORDS)},{rng.randint(1, 999)}" for _ in range(rng.randint(4, 20))]
    files = {f"bin/{name}.sh": script, conf: conf_text, secret: f"token={rng.randint(10**8, 10**9)}\n",
             "data/input.txt": lines(*records), lock: "pid 4242\n"}
    if "lock" not in problems:
        del files[lock]
    run = SCRIPT_RUN(name)
    return Instance(
        instruction=f"Running `bash /app/bin/{name}.sh` fails. Find out why from what it prints and fix what it "
                    f"needs in its environment (do not edit the script itself) until it runs successfully.",
        files=files, solve=fixes_in_order(run, FIXES, problems, caught) + [run],
        checks=[file_is(f"bin/{name}.sh", script), f"bash bin/{name}.sh >/dev/null 2>&1",
                file_is(report, f"{name}: {len(records)} records\n")], category="debugging")


def teach_script(asked: dict):
    yield from fix_until_it_runs(SCRIPT_RUN(asked["script"]), FIXES, r"^done: wrote \S+$")


# --------------------------------------------------------------------------------------------------- failing-test
TESTS_RUN = "python3 {}/tests/run_tests.py".format


def set_value(key: str, value: int | str, path: str) -> str:
    """failing-test's fix: the named line set to the value, whatever it holds (one number to copy, not two)."""
    return f"sed -i {q(f's/^{key} = .*/{key} = {value}/')} {path}"


def ask_tests(rng: random.Random) -> dict:
    return {"project": rng.choice(WORDS)}


TEST_RUNNER = '''import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from {table} import lookup  # noqa: E402

EXPECTED = {expected}

for key, want in EXPECTED.items():
    got = lookup(key)
    if got != want:
        print(f"FAIL test_{{key}}: {thing} of {{key!r}} is {{got}} (from data/{table}.conf), expected {{want}}")
        sys.exit(1)
print(f"all {{len(EXPECTED)}} tests passed")
'''
MODULE = '''from pathlib import Path

TABLE = Path(__file__).resolve().parent / "data" / "{table}.conf"


def lookup(key):
    for line in TABLE.read_text().splitlines():
        name, _, value = line.partition(" = ")
        if name == key:
            return int(value)
    raise KeyError(key)
'''


def build_tests(asked: dict, rng: random.Random) -> Instance:
    project, table = asked["project"], rng.choice(["limits", "quotas", "prices", "weights", "timeouts"])
    keys = rng.sample([w for w in WORDS if w != project], rng.randint(5, 8))
    want = {k: rng.randint(10, 500) for k in keys}
    wrong = rng.sample(keys, rng.randint(1, 3))
    have = {k: (want[k] + rng.choice([-1, 1]) * rng.randint(1, 40) if k in wrong else want[k]) for k in keys}
    runner = TEST_RUNNER.format(table=table, thing=table[:-1], expected=repr(want))
    module = MODULE.format(table=table)
    data = f"{project}/data/{table}.conf"
    solve, run = [], TESTS_RUN(project)
    for k in keys:  # the runner stops at the first failure, in EXPECTED's order
        if k in wrong:
            solve += [run, set_value(k, want[k], data)]
    fixed = lines(*(f"{k} = {want[k]}" for k in keys))
    return Instance(
        instruction=f"The tests of the project in `/app/{project}/` fail: run `{run}` from `/app` to see why. The "
                    f"code is right; some values in its data are wrong. Fix the data (not the code or the tests) so "
                    f"that the tests pass.",
        files={f"{project}/{table}.py": module, f"{project}/tests/run_tests.py": runner,
               data: lines(*(f"{k} = {have[k]}" for k in keys))},
        solve=solve + [run],
        checks=[file_is(f"{project}/{table}.py", module), file_is(f"{project}/tests/run_tests.py", runner),
                file_is(data, fixed), f"{run} >/dev/null 2>&1"], category="debugging")


def teach_tests(asked: dict):
    project = asked["project"]
    run = TESTS_RUN(project)
    while True:
        shown = yield run
        failed = re.search(r"^FAIL test_\w+: \w+ of '(\w+)' is (-?\d+) \(from (\S+)\), expected (-?\d+)$", shown,
                           flags=re.M)
        if failed is None:
            found(r"^all \d+ tests passed$", shown, "passing run")
            return
        key, _, where, want = failed.groups()
        yield set_value(key, want, f"{project}/{where}")


FAMILIES = (
    Family("failing-script", "deep", "run a script that stops at what its environment lacks; fix each thing it names",
           build_script, ask_script, teach_script),
    Family("failing-test", "deep", "run failing tests; fix the data values they name until they pass",
           build_tests, ask_tests, teach_tests),
)
