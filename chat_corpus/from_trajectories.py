"""Environments from trajectories: one Harbor task folder per agent trajectory, rebuilt by replaying what it read.
Runs in: the training venv; `python -m eval.from_trajectories` (its command line, with stages 2-3) calls `rebuild`.

Terminal-Universe's Stage 1 (chat_corpus/workspace_replay.py) on every format the corpus loaders read (Harbor job
dirs, chat JSONL with tool calls, Terminus-2 chats): the workspace's files as first shown go into environment/, the
files the agent created into rebuild/created/ (kept for checks, never in the environment), and instruction.md is
what the user asked (intent recovery: only the user's own turns). The check replays the trajectory in the rebuilt
workspace (local sandbox): the share of its looking commands whose output comes back the same (fidelity), and where
the source task is known (a Harbor trial's task folder, or `metadata.task_dir`) its tests are copied and run after
the trajectory's own commands. It lives in chat_corpus, not harbor_tasks, because it reads corpora (layers: docs/
development.md); stages 2-3 (a model's completion, tests and judge) in eval/from_trajectories.py.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from chat_corpus.records import RecordError
from chat_corpus.sources import Source, iter_rows, to_record
from chat_corpus.trajectory_steps import Step, Trajectory, read_trajectory
from chat_corpus.workspace_replay import MAX_FILE_CHARS, Workspace, replay_step
from harbor_tasks.evidence import VerifierWatch
from harbor_tasks.folder import CONFIG, TaskFolder, is_task
from harbor_tasks.verdict import passed
from harbor_tasks.verifier_run import run_tests
from sandbox import BlockingSandbox, SandboxConfig, SandboxError
from sandbox.errors import SandboxExecTimeoutError

LOOKS = re.compile(r"^\s*(cat|head|tail|sed -n|grep|ls|find|wc|awk|sort|uniq|cut|nl|less|more|stat|du)\b")
WRITES = re.compile(r"(^|[^0-9&])>|\btee\b|\s-i\b|\b(rm|mv|cp|touch|mkdir|chmod|chown|ln|sed -i)\b")
COMMAND_TIMEOUT_SEC = 20.0  # one replayed command in the check
TASK_TOML = """schema_version = "1.1"

[task]
name = "terminal-recipes/rebuilt-{name}"
description = "Rebuilt from an agent trajectory (Stage 1: deterministic replay)."
keywords = ["rebuilt-from-trajectory"]

[metadata]
source_trajectory_uid = {uid}
source = {origin}
rebuilt_by = "chat_corpus.from_trajectories (stage 1)"

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 300.0
network_mode = "no-network"
workdir = {workdir}
"""


@dataclass
class Rebuilt:
    """One trajectory's task folder and what went into it (its rebuild.json)."""

    name: str
    origin: str
    uid: str | None
    harness: str
    workdir: str
    steps: int
    recovered: list[str] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    missing: list[dict] = field(default_factory=list)
    unparsed: int = 0
    source_task: str | None = None
    check: dict | None = None


def _name(uid: str | None, index: int, taken: set[str]) -> str:
    base = re.sub(r"[^\w.-]+", "-", uid or "").strip(".-")[:100] or f"trajectory-{index}"
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}-{k}"
    taken.add(name)
    return name


def source_task(origin: str, metadata: dict) -> Path | None:
    """The task folder a trajectory came from, where it is here: a Harbor trial's config.json `task.path`, or the
    row's `metadata.task_dir`."""
    candidates = [metadata.get("task_dir")]
    file = Path(origin.rsplit(":", 1)[0])
    if file.name == "trajectory.json" and file.parent.name == "agent":
        try:
            config = json.loads((file.parent.parent / "config.json").read_text())
            candidates.append((config.get("task") or {}).get("path"))
        except (OSError, ValueError, AttributeError):
            pass
    for c in candidates:
        if isinstance(c, str) and c and is_task(c) and (Path(c) / "tests" / "test.sh").is_file():
            return Path(c)
    return None


def inside(root: Path, rel: str) -> Path:
    """root/rel, refused unless it stays beneath root (a trajectory's paths are untrusted)."""
    target = (root / rel).resolve()
    if target != root.resolve() and root.resolve() not in target.parents:
        raise ValueError(f"{rel}: outside {root}")
    return target


CLASH = "a file and a folder at once"  # why write_inside refused a path, in a report
CLASHED = f"{CLASH} in what the trajectory did (the path first in order kept)"  # the same, as a rebuild's missing


def write_inside(root: Path, rel: str, text: str) -> bool:
    """Write root/rel; False where the trajectory made the path or one of its folders also a file (or the other way)."""
    target = inside(root, rel)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    except (NotADirectoryError, IsADirectoryError, FileExistsError):
        return False
    return True


def write_dockerfile(task: Path, workdir: str) -> None:
    """environment/Dockerfile for the files under environment/files: `COPY files/<top>/ /<top>/` for each top-level
    folder they sit in, `WORKDIR` the trajectory's working folder."""
    files = task / "environment" / "files"
    tops = sorted({p.relative_to(files).parts[0] for p in files.rglob("*") if p.is_file()}) if files.is_dir() else []
    (task / "environment").mkdir(parents=True, exist_ok=True)
    (task / "environment" / "Dockerfile").write_text(
        "\n".join([f"FROM python:3.11-slim\nWORKDIR {workdir}"] + [f"COPY files/{t}/ /{t}/" for t in tops]) + "\n")


def write_task(out: Path, name: str, origin: str, uid: str | None, trajectory: Trajectory, ws: Workspace,
               source: Path | None) -> Rebuilt:
    task = out / name
    rebuilt = Rebuilt(name, origin, uid, trajectory.harness, trajectory.workdir, len(trajectory.steps),
                      unparsed=len(ws.unparsed), source_task=str(source) if source else None)
    files = task / "environment" / "files"
    for path, state in sorted(ws.paths.items()):
        if state.origin == "read":
            text = state.content if state.content is not None else state.known_prefix
            if text is None:
                rebuilt.missing.append({"path": path, "why": "only parts were shown, not from its first line",
                                        "by": state.source})
                continue
            if len(text) > MAX_FILE_CHARS:
                rebuilt.missing.append({"path": path, "why": "too large to keep", "by": state.source})
                continue
            if not write_inside(files, path.lstrip("/"), text):
                rebuilt.missing.append({"path": path, "why": CLASHED, "by": state.source})
                continue
            (rebuilt.recovered if state.content is not None else rebuilt.truncated).append(path)
        elif state.origin == "created":
            rebuilt.created.append(path)
            if state.content is not None and len(state.content) <= MAX_FILE_CHARS:
                if not write_inside(task / "rebuild" / "created", path.lstrip("/"), state.content):
                    rebuilt.missing.append({"path": path, "why": CLASHED, "by": state.source})
        else:
            rebuilt.missing.append({"path": path, "why": "changed before anything showed it", "by": state.source})
    for path, by in sorted(ws.referenced.items()):
        if path not in ws.paths:
            rebuilt.missing.append({"path": path, "why": "named by a command, never shown", "by": by})
    write_dockerfile(task, trajectory.workdir)
    (task / "instruction.md").write_text("\n\n".join(trajectory.requests).rstrip() + "\n")
    (task / CONFIG).write_text(TASK_TOML.format(name=name, uid=json.dumps(uid or ""),
                                                     origin=json.dumps(origin), workdir=json.dumps(trajectory.workdir)))
    solve = task / "solution" / "solve.sh"  # the trajectory's own commands: its solution, as it ran
    solve.parent.mkdir(parents=True, exist_ok=True)
    solve.write_text("#!/bin/bash\n# the source trajectory's commands, in order\n"
                     + "".join(f"cd {json.dumps(s.cwd)}\n{_as_shell(s)}\n" for s in trajectory.steps))
    solve.chmod(0o755)
    if source is not None:
        shutil.copytree(source / "tests", task / "tests")
    return rebuilt


def _as_shell(step: Step) -> str:
    """A step as one shell command (a file tool's write or edit through python3)."""
    if step.command is not None:
        return step.command
    args = base64.b64encode(json.dumps({"tool": step.tool, **step.args}).encode()).decode()
    return f"python3 -c {json.dumps(TOOL_SNIPPET)} {args}"


# a file tool's effect, run in the sandbox: read prints the file, write replaces it, edit replaces old with new once
TOOL_SNIPPET = ("import base64,json,sys;a=json.loads(base64.b64decode(sys.argv[1]));p=a['path'];t=a['tool']\n"
                "if t=='read': sys.stdout.write(open(p).read())\n"
                "elif t=='write': open(p,'w').write(a.get('content') or '')\n"
                "else: s=open(p).read(); open(p,'w').write(s.replace(a.get('old') or '',a.get('new') or '',1))")


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def check(task: Path, trajectory: Trajectory) -> dict:
    """The trajectory replayed in its rebuilt workspace: fidelity (its looking commands' outputs that come back the
    same, of those it saw whole), and, with the source task's tests copied in, whether they pass after its commands."""
    folder = TaskFolder.of(task)
    config = SandboxConfig(environment_dir=folder.environment_dir, workdir=folder.workdir,
                           build_args=folder.build_args)
    compared, same, differs = 0, 0, []
    try:
        with BlockingSandbox(config) as box:
            watch = VerifierWatch(box.root, box.command_path(), box.command_sessions)
            for step in trajectory.steps:
                command = _as_shell(step)
                looks = (step.tool == "read" or (step.command is not None and LOOKS.match(step.command)
                                                 and not WRITES.search(step.command)))
                try:
                    result = box.exec(command, cwd=step.cwd, timeout_sec=COMMAND_TIMEOUT_SEC)
                    got = result.stdout + result.stderr
                except SandboxExecTimeoutError:
                    got = None
                if looks and step.output is not None and not step.truncated:
                    compared += 1
                    if got is not None and _lines(got) == _lines(step.output):
                        same += 1
                    elif len(differs) < 5:
                        differs.append(command[:120])
            verdict = None
            if (task / "tests" / "test.sh").is_file():
                verdict, _ = run_tests(box, watch, task / "tests", folder.verifier_timeout_sec,
                                       folder.internet_declared)
    except (SandboxError, OSError) as err:
        return {"infra_failure": f"{type(err).__name__}: {err}"}
    out = {"looks_compared": compared, "looks_reproduced": same,
           "fidelity": round(same / compared, 4) if compared else None, "differs": differs}
    if verdict is not None:
        out.update(own_commands_pass=passed(verdict.score), verdict=verdict.outcome)
    return out


def rebuild(paths: list[str], out: Path, run_check: bool = True, progress: bool = True) -> dict:
    """Every trajectory of `paths` as a task folder under `out`; the run's report (also out/report.json)."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    skipped: Counter = Counter()
    unreadable: list[str] = []
    tasks: list[Rebuilt] = []
    taken: set[str] = set()
    index = 0
    bar = tqdm(desc="rebuilding", unit="trajectory", disable=not progress)
    for path in paths:
        for origin, row in iter_rows(Source(path=path)):
            index += 1
            bar.update(1)
            try:
                if isinstance(row, RecordError):
                    raise row
                _, record = to_record(row)
            except RecordError as err:
                skipped["unreadable"] += 1
                unreadable.append(f"{origin}: {err}")
                continue
            trajectory = read_trajectory(record)
            if not trajectory.requests:
                skipped["no_user_request"] += 1
                continue
            ws = Workspace()
            for step, after in zip(trajectory.steps, trajectory.steps[1:] + [None]):
                cwd = replay_step(ws, step)
                if after is not None and trajectory.harness == "tools":  # a shell tool's `cd` holds (Terminus:
                    after.cwd = cwd  # each prompt says where it is)
            if not ws.operations:
                skipped["no_file_operations"] += 1
                continue
            metadata = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}  # the record drops it
            uid = metadata.get("source_trajectory_uid")
            name = _name(uid if isinstance(uid, str) else None, index, taken)
            source = source_task(origin, metadata)
            rebuilt = write_task(out, name, origin, uid if isinstance(uid, str) else None, trajectory, ws, source)
            if run_check:
                rebuilt.check = check(out / name, trajectory)
            (out / name / "rebuild" / "rebuild.json").parent.mkdir(parents=True, exist_ok=True)
            (out / name / "rebuild" / "rebuild.json").write_text(json.dumps(rebuilt.__dict__, indent=2))
            tasks.append(rebuilt)
            bar.set_postfix(rebuilt=len(tasks), skipped=sum(skipped.values()))
    bar.close()
    return _report(out, tasks, skipped, unreadable, index, time.monotonic() - started, run_check)


def _report(out: Path, tasks: list[Rebuilt], skipped: Counter, unreadable: list[str], seen: int, seconds: float,
            run_check: bool) -> dict:
    checks = [t.check for t in tasks if t.check]
    compared = sum(c.get("looks_compared", 0) for c in checks)
    own = [c["own_commands_pass"] for c in checks if "own_commands_pass" in c]
    n = len(tasks) or 1
    report = {
        "out": str(out), "trajectories": seen, "rebuilt": len(tasks), "skipped": dict(skipped),
        "unreadable": unreadable[:20],
        "files_recovered_per_task": round(sum(len(t.recovered) for t in tasks) / n, 2),
        "files_truncated_per_task": round(sum(len(t.truncated) for t in tasks) / n, 2),
        "files_created_per_task": round(sum(len(t.created) for t in tasks) / n, 2),
        "files_missing_per_task": round(sum(len(t.missing) for t in tasks) / n, 2),
        "commands_unparsed": sum(t.unparsed for t in tasks),
        "checked": run_check,
        "fidelity": round(sum(c.get("looks_reproduced", 0) for c in checks) / compared, 4) if compared else None,
        "looks_compared": compared,
        "check_infra_failures": sum("infra_failure" in c for c in checks),
        "source_known": len(own), "own_commands_pass": sum(own),
        "seconds": round(seconds, 2), "trajectories_per_second": round(seen / seconds, 2) if seconds else None,
        "tasks": [t.name for t in tasks],
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def summary(report: dict) -> str:
    lines = [f"{report['rebuilt']} of {report['trajectories']} trajectories rebuilt into {report['out']} in "
             f"{report['seconds']} s; skipped {report['skipped'] or 'none'}",
             f"per task: {report['files_recovered_per_task']} files recovered, {report['files_truncated_per_task']} "
             f"truncated, {report['files_created_per_task']} created by the agent (kept aside), "
             f"{report['files_missing_per_task']} missing; {report['commands_unparsed']} commands not parsed"]
    if report["checked"]:
        lines.append(f"fidelity {report['fidelity']} ({report['looks_compared']} looks replayed); source task known "
                     f"for {report['source_known']}, its tests pass after the trajectory's commands in "
                     f"{report['own_commands_pass']}; {report['check_infra_failures']} checks failed to run")
    lines += [f"unreadable: {u}" for u in report["unreadable"]]
    return "\n".join(lines)
