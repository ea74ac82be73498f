"""Procedural Harbor tasks: terminal jobs whose names, contents and numbers vary per instance, by family and seed.
Runs in: any Python >= 3.11, standard library only; training (agentic GRPO, the learning run) and evals both use it.

    python -m harbor_tasks.generate --out DIR --seed S --n N [--families SET|NAME,...] [--world_seed W] [--force]
    python -m harbor_tasks.generate --list

Writes N task folders `<family>-<seed>-<index>` (instance i of family families[i % len(families)]; `-w<W>` added when
a world seed other than S is given); the same seeds give byte-identical folders, another seed other instances: keep
training and evaluation seeds disjoint. A deep family's instruction comes from the seed alone, its hidden world from
the world seed too (harbor_tasks/families). The families and layout: eval/tasks/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from harbor_tasks.families import DEFAULT_SET, FAMILIES, SETS, UnknownFamily, select
from harbor_tasks.families.instance import Case, q
from harbor_tasks.folder import CONFIG, is_task

TASK_TOML = """{top}

[task]
name = "terminal-recipes/{name}"
description = "Procedural task ({family}, seed {seed}, index {index})."
keywords = ["procedural", "{family}"]

[metadata]
difficulty = "{difficulty}"
category = "{category}"
tags = ["procedural", "{family}"]
author_name = "terminal-recipes"
family = "{family}"
seed = {seed}
index = {index}
{world}
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
{steps}"""
# Every file of a generated environment is dated this (2026-01-01 00:00 UTC), as SOURCE_DATE_EPOCH dates a
# reproducible build: COPY keeps mtimes, so a world written at generation time showed that time in `ls -l`, and two
# runs of one learning command trained on different screens
WORLD_MTIME = 1767225600
# a multi-round task (EvoCode-Bench v2's layout): one workspace and steps/round-N, the trial reward the rounds' mean
MULTI_STEP_TOP = 'schema_version = "1.2"\nmulti_step_reward_strategy = "mean"'
STEP_TOML = """
[[steps]]
name = "{name}"

[steps.agent]
timeout_sec = 180.0

[steps.verifier]
timeout_sec = 60.0
"""


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def task_name(family: str, seed: int, index: int, world_seed: int | None = None) -> str:
    """The folder name of instance `index` of `family` and `seed`; `-wW` where its hidden world has another seed."""
    world = seed if world_seed is None or FAMILIES[family].ask is None else world_seed
    return f"{family}-{seed}-{index}" + ("" if world == seed else f"-w{world}")


def write_task(out: Path, family: str, seed: int, index: int, world_seed: int | None = None) -> Path:
    """Instance `index` of `family` and `seed` (its world from `world_seed`, default the seed) as a task folder."""
    kind = FAMILIES[family]
    inst = kind.instance(seed, index, world_seed)
    shallow = kind.ask is None
    world = seed if world_seed is None or shallow else world_seed
    name = task_name(family, seed, index, world_seed)
    task = out / name
    steps = [f"round-{k}" for k in range(1, len(inst.rounds) + 1)]
    _write(task / CONFIG, TASK_TOML.format(name=name, family=family, seed=seed, index=index, category=inst.category,
                                           difficulty="easy" if shallow else "medium",
                                           world="" if shallow else f'set = "{kind.set}"\nworld_seed = {world}\n',
                                           top=MULTI_STEP_TOP if steps else 'schema_version = "1.1"',
                                           steps="".join(STEP_TOML.format(name=step) for step in steps)))
    for rel, content in sorted(inst.files.items()):
        _write(task / "environment" / "app" / rel, content)
    dockerfile = "FROM python:3.11-slim\nWORKDIR /app\nCOPY app/ /app/\n"
    if inst.setup:
        dockerfile += "COPY setup.sh /tmp/setup.sh\nRUN cd /app && bash /tmp/setup.sh && rm /tmp/setup.sh\n"
        _write(task / "environment" / "setup.sh",
               "#!/bin/bash\nset -euo pipefail\ncd \"${APP_DIR:-/app}\"\n" + "".join(c + "\n" for c in inst.setup),
               0o755)
    _write(task / "environment" / "Dockerfile", dockerfile)
    _date(task / "environment")
    if not steps:
        _write_step(task, inst.instruction, inst.solve, all_checks(inst.checks), shallow)
    for step, round_ in zip(steps, inst.rounds):
        _write_step(task / "steps" / step, round_.instruction, round_.solve, _cases(round_.cases), shallow)
    return task


def _date(root: Path) -> None:
    """`root` and everything under it dated WORLD_MTIME, once nothing more is written there (dating a path changes no
    folder's mtime; writing into one does)."""
    for path in [root, *root.rglob("*")]:
        os.utime(path, (WORLD_MTIME, WORLD_MTIME), follow_symlinks=False)


def _write_step(where: Path, instruction: str, solve: list[str], checks: str, shallow: bool) -> None:
    """instruction.md, solution/solve.sh and tests/test.sh of a task, or of one step of a multi-round task."""
    _write(where / "instruction.md", instruction.rstrip() + "\n")
    # a deep solution's looks may fail (a script run for its error): no -e there, the last commands decide
    strict = ("set -euo pipefail" if shallow
              else "# the teacher's commands for this world, each run whatever the last did\nset -u")
    _write(where / "solution" / "solve.sh",
           f"#!/bin/bash\n{strict}\ncd \"${{APP_DIR:-/app}}\"\n" + "".join(c + "\n" for c in solve), 0o755)
    _write(where / "tests" / "test.sh", test_script(checks), 0o755)


def test_script(checks: str, workdir: str = "${APP_DIR:-/app}") -> str:
    """A verifier's tests/test.sh around a checks body (which sets ok=0 on a failure): 1 or 0 into
    $LOGS_DIR/verifier/reward.txt (Harbor: /logs/verifier/reward.txt), run in `workdir`."""
    return ("#!/bin/bash\n"
            "# Verifier: writes 1 or 0 to $LOGS_DIR/verifier/reward.txt (Harbor: /logs/verifier/reward.txt).\n"
            "LOGS=\"${LOGS_DIR:-/logs}\"\nmkdir -p \"$LOGS/verifier\"\nok=1\n"
            f"cd \"{workdir}\" || ok=0\n" + checks
            + "echo \"$ok\" > \"$LOGS/verifier/reward.txt\"\necho \"reward=$ok\"\n")


def all_checks(checks: list[str]) -> str:
    """A checks body: every bash condition must hold."""
    return "".join(f"( {c} ) || ok=0\n" for c in checks)


def _cases(cases: list[Case]) -> str:
    """A round's cases: `PASS <case>` or `FAIL <case>: what the user says`, then EvoCode's CASE_SUMMARY line."""
    body = "passed=0\n" + "".join(
        f"if ( {c.check} ) >/dev/null 2>&1; then echo {q('PASS ' + c.name)}; passed=$((passed + 1)); "
        f"else echo {q(f'FAIL {c.name}: {c.says}')}; ok=0; fi\n" for c in cases)
    return body + f"echo \"CASE_SUMMARY total_cases={len(cases)} success_count=$passed\"\n"


def generate(out: Path, seed: int, n: int, families: list[str] | None = None,
             world_seed: int | None = None) -> list[Path]:
    """N task folders, round-robin over `families` (set or family names, harbor_tasks.families.select; default: the
    default set)."""
    families = select(families)
    return [write_task(out, families[i % len(families)], seed, i, world_seed) for i in range(n)]


def task_names(seed: int, n: int, families: list[str] | None = None, world_seed: int | None = None) -> list[str]:
    """The folder names generate() writes for these arguments, without writing them."""
    families = select(families)
    return [task_name(families[i % len(families)], seed, i, world_seed) for i in range(n)]


def listing() -> str:
    """Every family with its set and one line on what the agent must do."""
    width = max(map(len, FAMILIES))
    return "\n".join(f"{f.name:<{width}}  {f.set:<11}  {f.summary}" for f in FAMILIES.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harbor_tasks.generate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="directory for the task folders")
    ap.add_argument("--seed", type=int, help="instance seed (>= 0); train and eval seeds must differ")
    ap.add_argument("--n", type=int, help="number of tasks")
    ap.add_argument("--families", help=f"comma-separated sets ({', '.join(SETS)}) and families (--list); "
                    f"default: the {DEFAULT_SET} set")
    ap.add_argument("--world_seed", type=int, help="the deep families' hidden worlds (default: --seed); the same "
                    "--seed with another world seed gives the same instructions over other worlds")
    ap.add_argument("--force", action="store_true", help="replace the task folders of a non-empty --out")
    ap.add_argument("--list", action="store_true", help="print every family, its set and what the agent must do")
    args = ap.parse_args(argv)

    def fail(msg: str) -> int:
        print(f"error: {msg}", file=sys.stderr)
        return 2

    if args.list:
        print(listing())
        return 0
    missing = [f"--{k}" for k in ("out", "seed", "n") if getattr(args, k) is None]
    if missing:
        return fail(f"{', '.join(missing)} required (or --list)")
    if args.n < 1:
        return fail(f"--n {args.n}: must be at least 1")
    if args.seed < 0:
        return fail(f"--seed {args.seed}: must be >= 0")
    if args.world_seed is not None and args.world_seed < 0:
        return fail(f"--world_seed {args.world_seed}: must be >= 0")
    if args.families is not None and not args.families.strip(", "):
        return fail("--families: none given")
    try:
        families = select(args.families)
    except UnknownFamily as err:
        return fail(str(err))
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
    tasks = generate(out, args.seed, args.n, families, args.world_seed)
    worlds = "" if args.world_seed is None else f", world seed {args.world_seed}"
    print(f"generated {len(tasks)} tasks from {len(families)} families ({','.join(families)}), seed {args.seed}"
          f"{worlds}, in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
