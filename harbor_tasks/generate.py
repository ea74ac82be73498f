"""Procedural Harbor tasks: short terminal jobs whose names, contents and numbers vary per instance, by family and seed.
Runs in: any Python >= 3.11, standard library only; training (agentic GRPO, the learning run) and evals both use it.

    python -m harbor_tasks.generate --out DIR --seed S --n N [--families a,b,...] [--force]

Writes N task folders `<family>-<seed>-<index>` (instance i of family families[i % len(families)]); the same seed
gives byte-identical folders, another seed other instances: keep training and evaluation seeds disjoint. Each
family is one function `(rng) -> Instance`. The families and layout: eval/tasks/README.md.
"""

from __future__ import annotations

import argparse
import random
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harbor_tasks.folder import CONFIG, is_task

WORDS = ["alpha", "amber", "apple", "birch", "bison", "cedar", "cobalt", "coral", "delta", "ember", "falcon",
         "fern", "garnet", "harbor", "hazel", "indigo", "jasper", "juniper", "kelp", "lemon", "lotus", "maple",
         "marble", "nectar", "nova", "olive", "onyx", "pebble", "pine", "quartz", "raven", "river", "saffron",
         "sage", "slate", "spruce", "tango", "thistle", "topaz", "umber", "velvet", "willow", "xenon", "yarrow",
         "zephyr", "zinc"]
DIRS = ["data", "work", "inbox", "files", "project", "input", "assets", "docs"]


@dataclass
class Instance:
    instruction: str
    files: dict[str, str]                                  # path relative to /app -> content
    solve: list[str]                                       # oracle commands, run in /app
    checks: list[str]                                      # bash conditions, run in /app; all must hold
    setup: list[str] = field(default_factory=list)         # environment/setup.sh commands, run in /app
    category: str = "file-ops"


def _words(rng: random.Random, k: int) -> list[str]:
    return rng.sample(WORDS, k)


def _q(s: str) -> str:
    return shlex.quote(s)


def _file_is(path: str, content: str) -> str:
    """A check: `path` holds exactly `content` (compared byte for byte)."""
    return f"[ -f {_q(path)} ] && [ \"$(cat {_q(path)}; echo x)\" = {_q(content + 'x')} ]"


def _number_is(path: str, value: int) -> str:
    """A check: `path` holds the number (surrounding whitespace ignored)."""
    return f"[ -f {_q(path)} ] && [ \"$(tr -d '[:space:]' < {_q(path)})\" = {_q(str(value))} ]"


def write_value(rng: random.Random) -> Instance:
    name = f"{rng.choice(WORDS)}_{rng.choice(['token', 'key', 'id', 'code'])}"
    value = f"{rng.choice(WORDS)}-{rng.randint(1000, 99999)}"
    path = f"out/{name}.txt"
    return Instance(
        instruction=f"Create the file `/app/{path}` (create `/app/out/` if needed) containing exactly the text "
                    f"`{value}` followed by a single newline.",
        files={"README.txt": "Write the requested value into /app/out/.\n"},
        solve=["mkdir -p out", f"echo {_q(value)} > {_q(path)}"],
        checks=[_file_is(path, value + "\n")], category="file-ops")


def count_lines(rng: random.Random) -> Instance:
    d, name = rng.choice(DIRS), rng.choice(WORDS)
    n = rng.randint(5, 40)
    lines = [f"{rng.choice(WORDS)} {rng.randint(0, 999)} {rng.choice(WORDS)}" for _ in range(n)]
    return Instance(
        instruction=f"Count the lines of `/app/{d}/{name}.log` and write the count, as a plain decimal number "
                    f"followed by a newline, to `/app/line_count.txt`.",
        files={f"{d}/{name}.log": "".join(line + "\n" for line in lines)},
        solve=[f"wc -l < {d}/{name}.log > line_count.txt"],
        checks=[_number_is("line_count.txt", n)], category="text-processing")


def count_words(rng: random.Random) -> Instance:
    d, name = rng.choice(DIRS), rng.choice(WORDS)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))) for _ in range(rng.randint(3, 15))]
    total = sum(len(line.split()) for line in lines)
    return Instance(
        instruction=f"Count the words (whitespace-separated, as `wc -w` counts them) in `/app/{d}/{name}.txt` and "
                    f"write the count, as a plain decimal number followed by a newline, to `/app/word_count.txt`.",
        files={f"{d}/{name}.txt": "".join(line + "\n" for line in lines)},
        solve=[f"wc -w < {d}/{name}.txt > word_count.txt"],
        checks=[_number_is("word_count.txt", total)], category="text-processing")


def rename_ext(rng: random.Random) -> Instance:
    d = rng.choice(DIRS)
    old, new, other = rng.sample(["txt", "md", "log", "dat", "csv", "bak", "cfg", "out"], 3)
    stems = _words(rng, rng.randint(4, 7))
    k = rng.randint(2, len(stems) - 1)
    renamed, kept = stems[:k], stems[k:]
    files = {f"{d}/{s}.{old}": f"{s} {rng.randint(0, 9999)}\n" for s in renamed}
    files.update({f"{d}/{s}.{other}": f"{s} {rng.randint(0, 9999)}\n" for s in kept})
    checks = []
    for s in renamed:
        checks += [f"[ ! -e {_q(f'{d}/{s}.{old}')} ]", _file_is(f"{d}/{s}.{new}", files[f"{d}/{s}.{old}"])]
    checks += [_file_is(f"{d}/{s}.{other}", files[f"{d}/{s}.{other}"]) for s in kept]
    checks.append(f"[ \"$(ls -A {_q(d)} | wc -l)\" = {len(stems)} ]")
    return Instance(
        instruction=f"In `/app/{d}/`, rename every file ending in `.{old}` so that it ends in `.{new}` instead "
                    f"(`x.{old}` becomes `x.{new}`), keeping its content. Do not touch the other files.",
        files=files,
        solve=[f"cd {d}", f"for f in *.{old}; do mv -- \"$f\" \"${{f%.{old}}}.{new}\"; done"],
        checks=checks, category="file-ops")


def replace_config(rng: random.Random) -> Instance:
    name = rng.choice(WORDS)
    keys = ["host", "port", "workers", "timeout", "log_level", "cache_size", "retries", "mode"]
    rng.shuffle(keys)
    values = {"host": f"{rng.choice(WORDS)}.internal", "port": str(rng.randint(1024, 9999)),
              "workers": str(rng.randint(1, 16)), "timeout": str(rng.randint(5, 120)),
              "log_level": rng.choice(["debug", "info", "warning"]), "cache_size": str(rng.randint(16, 512)),
              "retries": str(rng.randint(1, 9)), "mode": rng.choice(["fast", "safe", "batch"])}
    key = rng.choice(["port", "workers", "timeout", "cache_size", "retries"])
    new = str(int(values[key]) + rng.randint(1, 50))
    before = "".join(f"{k} = {values[k]}\n" for k in keys)
    after = before.replace(f"{key} = {values[key]}\n", f"{key} = {new}\n")
    path = f"config/{name}.conf"
    return Instance(
        instruction=f"In `/app/{path}`, change the value of `{key}` from `{values[key]}` to `{new}`. Keep the "
                    f"`key = value` format and leave every other line unchanged.",
        files={path: before},
        solve=[f"sed -i 's/^{key} = .*/{key} = {new}/' {path}"],
        checks=[_file_is(path, after)], category="config")


def sort_uniq(rng: random.Random) -> Instance:
    d, name = rng.choice(DIRS), rng.choice(WORDS)
    pool = _words(rng, rng.randint(5, 10))
    lines = pool + [rng.choice(pool) for _ in range(rng.randint(4, 12))]
    rng.shuffle(lines)
    expected = "".join(w + "\n" for w in sorted(set(lines)))
    return Instance(
        instruction=f"Write the lines of `/app/{d}/{name}.txt` sorted alphabetically with duplicates removed "
                    f"(each distinct line once, as `sort -u` prints them) to `/app/{d}/{name}.sorted.txt`. Leave "
                    f"the original file unchanged.",
        files={f"{d}/{name}.txt": "".join(w + "\n" for w in lines)},
        solve=[f"LC_ALL=C sort -u {d}/{name}.txt > {d}/{name}.sorted.txt"],
        checks=[_file_is(f"{d}/{name}.sorted.txt", expected),
                _file_is(f"{d}/{name}.txt", "".join(w + "\n" for w in lines))], category="text-processing")


def csv_column(rng: random.Random) -> Instance:
    name = rng.choice(WORDS)
    header = rng.sample(["id", "name", "city", "score", "team", "level", "color", "size"], rng.randint(3, 6))
    col = rng.randrange(len(header))
    rows = [[f"{rng.choice(WORDS)}{rng.randint(1, 99)}" for _ in header] for _ in range(rng.randint(4, 12))]
    csv = ",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    expected = "".join(r[col] + "\n" for r in rows)
    return Instance(
        instruction=f"`/app/{name}.csv` is a comma-separated file with a header line (no quoting). Write the values "
                    f"of its `{header[col]}` column, one per line in file order and without the header, to "
                    f"`/app/{header[col]}.txt`.",
        files={f"{name}.csv": csv},
        # by the column's name, not its position: the instruction does not say where the column is, and a solution
        # (a teacher's, a student's) that follows from the instruction alone needs no look at the file first
        solve=[f"awk -F, -v col={header[col]} 'NR == 1 {{for (i = 1; i <= NF; i++) if ($i == col) c = i; next}} "
               f"{{print $c}}' {name}.csv > {header[col]}.txt"],
        checks=[_file_is(f"{header[col]}.txt", expected)], category="data-processing")


def sum_numbers(rng: random.Random) -> Instance:
    d, name = rng.choice(DIRS), rng.choice(WORDS)
    nums = [rng.randint(-500, 2000) for _ in range(rng.randint(5, 25))]
    return Instance(
        instruction=f"`/app/{d}/{name}.nums` holds one integer per line. Write their sum, as a plain decimal "
                    f"number followed by a newline, to `/app/sum.txt`.",
        files={f"{d}/{name}.nums": "".join(f"{x}\n" for x in nums)},
        solve=[f"awk '{{s += $1}} END {{print s}}' {d}/{name}.nums > sum.txt"],
        checks=[_number_is("sum.txt", sum(nums))], category="data-processing")


def make_tree(rng: random.Random) -> Instance:
    root = rng.choice(["site", "release", "build", "deploy", "archive", "bundle"]) + f"_{rng.randint(10, 99)}"
    tops = _words(rng, rng.randint(2, 3))
    dirs = [f"{root}/{t}/{s}" for t in tops for s in sorted(rng.sample(["src", "bin", "etc", "logs", "tmp", "lib"],
                                                                        rng.randint(1, 3)))]
    listing = "\n".join(f"- `/app/{p}`" for p in dirs)
    return Instance(
        instruction=f"Create these directories (and their parents) under `/app`:\n\n{listing}\n\n"
                    f"Then create an empty file `/app/{root}/.done`.",
        files={"README.txt": "Create the requested directory tree here.\n"},
        solve=[f"mkdir -p {' '.join(dirs)}", f"touch {root}/.done"],
        checks=[f"[ -d {_q(p)} ]" for p in dirs] + [_file_is(f"{root}/.done", "")], category="file-ops")


def set_perms(rng: random.Random) -> Instance:
    d = rng.choice(["bin", "scripts", "secrets", "keys", "deploy"])
    stems = _words(rng, 3)
    modes = {s: rng.choice(["600", "640", "700", "750", "755", "400", "444"]) for s in stems}
    files = {f"{d}/{s}.conf": f"# {s}\nvalue={rng.randint(0, 999)}\n" for s in stems}
    table = "\n".join(f"- `/app/{d}/{s}.conf`: `{modes[s]}`" for s in stems)
    return Instance(
        instruction=f"Set these octal permission modes exactly:\n\n{table}\n\nDo not change the files' contents.",
        files=files,
        setup=[f"chmod 0666 {d}/*.conf"],
        solve=[f"chmod {modes[s]} {d}/{s}.conf" for s in stems],
        checks=[f"[ \"$(stat -c %a {_q(f'{d}/{s}.conf')})\" = {modes[s]} ]" for s in stems]
               + [_file_is(p, c) for p, c in files.items()], category="permissions")


FAMILIES = {f.__name__.replace("_", "-"): f for f in (write_value, count_lines, count_words, rename_ext,
                                                      replace_config, sort_uniq, csv_column, sum_numbers,
                                                      make_tree, set_perms)}

TASK_TOML = """schema_version = "1.1"

[task]
name = "terminal-recipes/{name}"
description = "Procedural task ({family}, seed {seed}, index {index})."
keywords = ["procedural", "{family}"]

[metadata]
difficulty = "easy"
category = "{category}"
tags = ["procedural", "{family}"]
author_name = "terminal-recipes"
family = "{family}"
seed = {seed}
index = {index}

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 180.0

[environment]
build_timeout_sec = 300.0
cpus = 1
memory_mb = 1024
storage_mb = 2048
network_mode = "no-network"
workdir = "/app"
"""


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def write_task(out: Path, family: str, seed: int, index: int) -> Path:
    inst = FAMILIES[family](random.Random(f"{family}:{seed}:{index}"))
    name = f"{family}-{seed}-{index}"
    task = out / name
    _write(task / CONFIG, TASK_TOML.format(name=name, family=family, seed=seed, index=index,
                                                category=inst.category))
    _write(task / "instruction.md", inst.instruction.rstrip() + "\n")
    for rel, content in sorted(inst.files.items()):
        _write(task / "environment" / "app" / rel, content)
    dockerfile = "FROM python:3.11-slim\nWORKDIR /app\nCOPY app/ /app/\n"
    if inst.setup:
        dockerfile += "COPY setup.sh /tmp/setup.sh\nRUN cd /app && bash /tmp/setup.sh && rm /tmp/setup.sh\n"
        _write(task / "environment" / "setup.sh",
               "#!/bin/bash\nset -euo pipefail\ncd \"${APP_DIR:-/app}\"\n" + "".join(c + "\n" for c in inst.setup),
               0o755)
    _write(task / "environment" / "Dockerfile", dockerfile)
    _write(task / "solution" / "solve.sh",
           "#!/bin/bash\nset -euo pipefail\ncd \"${APP_DIR:-/app}\"\n" + "".join(c + "\n" for c in inst.solve), 0o755)
    checks = "".join(f"( {c} ) || ok=0\n" for c in inst.checks)
    _write(task / "tests" / "test.sh",
           "#!/bin/bash\n# Verifier: writes 1 or 0 to $LOGS_DIR/verifier/reward.txt (Harbor: /logs/verifier/reward.txt).\n"
           "LOGS=\"${LOGS_DIR:-/logs}\"\nmkdir -p \"$LOGS/verifier\"\nok=1\n"
           "cd \"${APP_DIR:-/app}\" || ok=0\n" + checks
           + "echo \"$ok\" > \"$LOGS/verifier/reward.txt\"\necho \"reward=$ok\"\n", 0o755)
    return task


def generate(out: Path, seed: int, n: int, families: list[str] | None = None) -> list[Path]:
    families = families or list(FAMILIES)
    return [write_task(out, families[i % len(families)], seed, i) for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harbor_tasks.generate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="directory for the task folders")
    ap.add_argument("--seed", required=True, type=int, help="instance seed (>= 0); train and eval seeds must differ")
    ap.add_argument("--n", required=True, type=int, help="number of tasks")
    ap.add_argument("--families", help=f"comma-separated subset of: {','.join(FAMILIES)} (default: all)")
    ap.add_argument("--force", action="store_true", help="replace the task folders of a non-empty --out")
    args = ap.parse_args(argv)

    def fail(msg: str) -> int:
        print(f"error: {msg}", file=sys.stderr)
        return 2

    if args.n < 1:
        return fail(f"--n {args.n}: must be at least 1")
    if args.seed < 0:
        return fail(f"--seed {args.seed}: must be >= 0")
    families = list(FAMILIES)
    if args.families is not None:
        families = [f.strip() for f in args.families.split(",") if f.strip()]
        unknown = [f for f in families if f not in FAMILIES]
        if unknown or not families:
            return fail(f"--families: unknown family {','.join(unknown) or '(none given)'}; "
                        f"known: {','.join(FAMILIES)}")
        families = list(dict.fromkeys(families))
    out = args.out
    if out.exists() and not out.is_dir():
        return fail(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()):
        if not args.force:
            return fail(f"--out {out}: exists and is not empty; pass --force to replace its task folders")
        entries = list(out.iterdir())
        foreign = [e.name for e in entries if not is_task(e)]
        if foreign:
            return fail(f"--out {out}: --force replaces only task folders, but it also holds {', '.join(foreign[:5])}")
        for e in entries:
            shutil.rmtree(e)
    out.mkdir(parents=True, exist_ok=True)
    tasks = generate(out, args.seed, args.n, families)
    print(f"generated {len(tasks)} tasks from {len(families)} families ({','.join(families)}), seed {args.seed}, "
          f"in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
