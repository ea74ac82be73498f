"""Environments from trajectories, all stages: rebuild (Stage 1), complete and write tests (2), keep the sufficient (3).
Runs in: the training venv; `python -m eval.from_trajectories --trajectories PATH... --out DIR [--model_url URL
--model M | --stand_in source] [--no_check]`.

Stage 1 is chat_corpus/from_trajectories.py. With `--model_url` three roles are played by an OpenAI-compatible model,
one JSON answer each: completion (files for what is missing or truncated; never a path the agent created, never a
change to what the trajectory showed), tests (bash conditions for tests/test.sh, written from the instruction and
the completed workspace only: never the trajectory, its commands or the agent's files) and a sufficiency judge. Then
a task whose tests already pass before any work, or that the judge finds insufficient, is moved to DIR/rejected/.
`--stand_in source` plays the roles without a model for tasks whose source task is here (our generated families):
the source's environment, its tests, its own solution as the judge, and its family, seed and index in task.toml (the
scripted teacher's deep policy re-solves from them); named so in every report. How and why: docs/from-trajectories.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
from pathlib import Path

import httpx

from chat_corpus.from_trajectories import CLASH, rebuild, summary, write_dockerfile, write_inside
from chat_corpus.workspace_replay import MAX_FILE_CHARS, resolve
from harbor_tasks.decision_point import DecisionPoint, PlayLimits
from harbor_tasks.folder import CONFIG, TaskFolder, read_text
from harbor_tasks.generate import all_checks, test_script
from harbor_tasks.verdict import passed
from rewards.judge import Judge, JudgeConfig, JudgeError
from sandbox import SandboxConfig, SandboxError

SHOWN_CHARS = 6000  # of one file's text in a prompt
SANDBOX = SandboxConfig()  # the sandbox's default limits, which the tests of a rebuilt task run under
ORIGIN_KEYS = ("family", "set", "seed", "index", "world_seed")  # a generated task's [metadata] (harbor_tasks.generate)
FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```\s*$", re.DOTALL)
COMPLETION = """You rebuild the workspace of a terminal task from what an agent's trajectory showed of it.
The task the agent was given:
{instruction}

Working folder: {workdir}
Files as the trajectory first showed them (a truncated one: only its first lines were shown):
{files}
Paths the trajectory needed but never showed: {missing}
Paths the agent created (its outputs: they must stay absent): {created}

Write the files the workspace still needs for the task to be solvable: the missing ones, the rest of the truncated
ones, and whatever else the task's work reads. Do not solve the task and do not change what was shown.
Answer with one JSON object: {{"files": {{"<absolute path>": "<full content>"}}}}"""
TESTS = """Write the checks of a terminal task's verifier.
The task:
{instruction}

Working folder: {workdir}; the workspace before any work:
{files}
Each check is a bash condition run in the working folder that holds once the task is done; together they must fail
before the work. Answer with one JSON object: {{"checks": ["<bash condition>", ...]}}"""
JUDGE = """Is this terminal task solvable as it stands: does its workspace hold what the task needs, and do its
checks test what the task asks?
The task:
{instruction}

Working folder: {workdir}; the workspace:
{files}
The checks: {checks}
Answer with one JSON object: {{"sufficient": true or false, "reason": "<one line>"}}"""


class RoleError(Exception):
    """A role's answer that cannot be used (the model's fault: the task is rejected with this reason)."""


def answer_json(text: str) -> dict:
    """The JSON object of a model's answer (a ```json fence and a think block allowed)."""
    text = text.split("</think>")[-1].strip()
    fenced = FENCE.match(text)
    try:
        value = json.loads(fenced.group(1) if fenced else text)
    except json.JSONDecodeError as err:
        raise RoleError(f"the answer is not a JSON object ({err.msg})") from None
    if not isinstance(value, dict):
        raise RoleError("the answer is not a JSON object")
    return value


def workspace_files(task: Path) -> dict[str, str]:
    """Absolute path -> text of every file the task's environment/files holds."""
    root = task / "environment" / "files"
    return {"/" + p.relative_to(root).as_posix(): p.read_text(errors="replace")
            for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() else {}


def _shown(files: dict[str, str], truncated: list[str]) -> str:
    return "\n".join(f"--- {path}{' (truncated)' if path in truncated else ''}\n{text[:SHOWN_CHARS]}"
                     for path, text in files.items()) or "(none)"


class EndpointRoles:
    """The three roles played by one OpenAI-compatible model (rewards.judge.Judge: deadlines, retries)."""

    name = "endpoint"

    def __init__(self, model_url: str, model: str, api_key: str | None = None):
        self.client = Judge(JudgeConfig(base_url=model_url, model=model, api_key=api_key, max_concurrency=4))

    async def _ask(self, prompt: str) -> dict:
        reply = await self.client.chat([{"role": "user", "content": prompt}], {"temperature": 0.0})
        return answer_json(reply.text)

    async def complete(self, task: Path, info: dict) -> dict[str, str]:
        answer = await self._ask(COMPLETION.format(
            instruction=(task / "instruction.md").read_text().strip(), workdir=info["workdir"],
            files=_shown(workspace_files(task), info["truncated"]),
            missing=", ".join(m["path"] for m in info["missing"]) or "(none)",
            created=", ".join(info["created"]) or "(none)"))
        files = answer.get("files")
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise RoleError('completion: "files" is not an object of path -> text')
        return files

    async def tests(self, task: Path, info: dict) -> list[str]:
        answer = await self._ask(TESTS.format(instruction=(task / "instruction.md").read_text().strip(),
                                              workdir=info["workdir"], files=_shown(workspace_files(task), [])))
        checks = answer.get("checks")
        if not isinstance(checks, list) or not checks or not all(isinstance(c, str) and c.strip() for c in checks):
            raise RoleError('tests: "checks" is not a non-empty list of bash conditions')
        return checks

    async def judge(self, task: Path, info: dict) -> tuple[bool, str]:
        answer = await self._ask(JUDGE.format(instruction=(task / "instruction.md").read_text().strip(),
                                              workdir=info["workdir"], files=_shown(workspace_files(task), []),
                                              checks=(task / "tests" / "test.sh").read_text()))
        if not isinstance(answer.get("sufficient"), bool):
            raise RoleError('judge: "sufficient" is not true or false')
        return answer["sufficient"], str(answer.get("reason", ""))[:300]

    async def aclose(self) -> None:
        await self.client.aclose()


def apply_completion(task: Path, info: dict, files: dict[str, str]) -> dict:
    """Write a completion's files into the environment; refused (counted): a path the agent created, a change to a
    whole file the trajectory showed, a truncated file not kept as its shown start, a path with expansions, a file
    over the size bound."""
    if not files:  # nothing to add (the stand-in's environment is the source's own, its Dockerfile with it)
        return {"written": [], "refused": {}}
    root, current = task / "environment" / "files", workspace_files(task)
    written, refused = [], {}
    for raw, text in files.items():
        path = resolve(info["workdir"], raw)
        why = ("not a plain path" if path is None else "the agent created it" if path in info["created"]
               else "changes what the trajectory showed" if path in info["recovered"] and text != current[path]
               else "drops the start that was shown" if path in info["truncated"]
               and not text.startswith(current[path]) else "too large" if len(text) > MAX_FILE_CHARS else None)
        if why:
            refused[raw] = why
            continue
        try:
            kept = write_inside(root, path.lstrip("/"), text)
        except ValueError:
            refused[raw] = "outside the workspace"
            continue
        if not kept:
            refused[raw] = CLASH
            continue
        written.append(path)
    write_dockerfile(task, info["workdir"])
    return {"written": sorted(written), "refused": refused}


class SourceStandIn:
    """A scripted stand-in for the three roles, for a task whose source task is here (our generated families): its
    environment is the completion, its tests the tests, and the judge runs its own solution against them."""

    name = "scripted stand-in (the source task's environment, tests and solution)"

    async def complete(self, task: Path, info: dict) -> dict[str, str]:
        source = Path(info["source_task"] or "")
        if not (source / "environment").is_dir():
            raise RoleError("stand-in: the source task is not here")
        shutil.rmtree(task / "environment")
        shutil.copytree(source / "environment", task / "environment")
        # the source's family, seed and index: what the scripted teacher's deep policy plays from (its re-solve)
        origin = {key: TaskFolder.of(source).metadata.get(key) for key in ORIGIN_KEYS}
        lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in origin.items()
                        if isinstance(value, (str, int)))
        config = read_text(task / CONFIG)
        (task / CONFIG).write_text(config.replace("[metadata]\n", f'[metadata]\nstand_in = "source"\n{lines}', 1))
        return {}

    async def tests(self, task: Path, info: dict) -> list[str]:
        raise RoleError("stand-in: the source task has no tests/test.sh")  # stage 1 copied them where it has

    async def judge(self, task: Path, info: dict) -> tuple[bool, str]:
        solve = Path(info["source_task"]) / "solution" / "solve.sh"
        verdict = await asyncio.to_thread(play_tests, task, solve.read_text() if solve.is_file() else "")
        if verdict is None:  # the sandbox, not the task: infrastructure, never a verdict
            raise SandboxError("the source task's solution could not be played in the completed workspace")
        return passed(verdict), "the source task's own solution passes the tests here" if passed(verdict) else \
            "the source task's own solution fails the tests here"

    async def aclose(self) -> None:
        return None


def play_tests(task: Path, script: str = "") -> float | None:
    """The tests' score in a fresh sandbox of the task after `script` (none: before any work), played as a decision
    point with no earlier commands; None when it could not run (infrastructure)."""
    limits = PlayLimits(command_timeout_sec=120, memory_mb=SANDBOX.memory_mb, storage_mb=SANDBOX.storage_mb)
    try:
        verdict = DecisionPoint(task, [], limits).play([script] if script.strip() else [], then=[]).verdict
    except (SandboxError, OSError):
        return None
    return None if verdict is None or verdict.infra_kind else verdict.score


async def finish(out: Path, roles, names: list[str]) -> dict:
    """Stages 2-3 on the rebuilt tasks `names` under `out`: each kept, or moved to out/rejected/ with its reason."""
    kept, rejected, infra = [], {}, {}
    for name in names:
        task = out / name
        info = json.loads((task / "rebuild" / "rebuild.json").read_text())
        stages: dict = {"roles": roles.name}
        try:
            stages["completion"] = apply_completion(task, info, await roles.complete(task, info))
            if not (task / "tests" / "test.sh").is_file():
                script = task / "tests" / "test.sh"
                script.parent.mkdir(parents=True, exist_ok=True)
                script.write_text(test_script(all_checks(await roles.tests(task, info)), info["workdir"]))
                script.chmod(0o755)
                stages["tests"] = "written"
            before = await asyncio.to_thread(play_tests, task)
            if before is None:
                raise SandboxError("the tests could not run in the completed workspace")
            if passed(before):
                raise RoleError("the tests pass before any work")
            sufficient, reason = await roles.judge(task, info)
            stages["judge"] = {"sufficient": sufficient, "reason": reason}
            if not sufficient:
                raise RoleError(f"judged insufficient: {reason}")
            kept.append(name)
        except RoleError as err:
            rejected[name] = stages["rejected"] = str(err)
        except (JudgeError, SandboxError, OSError) as err:  # the endpoint or the sandbox: infrastructure, not a verdict
            infra[name] = stages["infra_failure"] = f"{type(err).__name__}: {err}"
        info["stages"] = stages
        (task / "rebuild" / "rebuild.json").write_text(json.dumps(info, indent=2))
        if name not in kept:  # out/ stays a suite of kept tasks; infrastructure failures can be run again
            aside = out / ("rejected" if name in rejected else "unfinished")
            aside.mkdir(exist_ok=True)
            shutil.move(str(task), aside / name)
    await roles.aclose()
    return {"roles": roles.name, "kept": len(kept), "rejected": rejected, "infra_failures": infra}


def rebuild_environments(trajectories: list[str], out: Path, roles=None, run_check: bool = True,
                         progress: bool = True) -> dict:
    """Stage 1 on `trajectories` into `out`, then, with `roles` (EndpointRoles, SourceStandIn), stages 2-3: out/
    keeps only the kept tasks. The report, also in out/report.json (its `stages_2_3` where the roles played)."""
    report = rebuild(trajectories, out, run_check=run_check, progress=progress)
    if roles is not None:
        report["stages_2_3"] = asyncio.run(finish(out, roles, report["tasks"]))
        (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.from_trajectories", description=__doc__.split("\n")[0])
    parser.add_argument("--trajectories", nargs="+", required=True,
                        help="Harbor job or trial dirs, chat JSONL files (tool calls or Terminus-2 chats)")
    parser.add_argument("--out", required=True, help="where the task folders go (one per trajectory)")
    roles = parser.add_mutually_exclusive_group()
    roles.add_argument("--model_url", help="an OpenAI-compatible server (ending in /v1) for stages 2-3")
    roles.add_argument("--stand_in", choices=["source"], help="stages 2-3 without a model, from the source tasks")
    parser.add_argument("--model", default="model", help="with --model_url: the model name")
    parser.add_argument("--api_key", default=None)
    parser.add_argument("--no_check", action="store_true", help="skip replaying each trajectory in its rebuilt "
                        "workspace (fidelity and the source task's tests)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.model_url:  # a dead endpoint is one line before any work
        try:
            httpx.get(f"{args.model_url.rstrip('/')}/models", timeout=10,
                      headers={"Authorization": f"Bearer {args.api_key}"} if args.api_key else None)
        except httpx.HTTPError as err:
            print(f"error: --model_url {args.model_url}: no answer ({type(err).__name__}); start the server or fix "
                  "the URL (an OpenAI-compatible server ending in /v1)", file=sys.stderr)
            return 2
    roles = (EndpointRoles(args.model_url, args.model, args.api_key) if args.model_url
             else SourceStandIn() if args.stand_in else None)
    try:
        report = rebuild_environments(args.trajectories, out, roles, run_check=not args.no_check,
                                      progress=not args.json)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stages = report.get("stages_2_3")
    print(json.dumps(report, indent=2) if args.json else summary(report) + (
        f"\nstages 2-3 ({stages['roles']}): {stages['kept']} kept in {out}, {len(stages['rejected'])} rejected "
        f"({out / 'rejected'}), {len(stages['infra_failures'])} infrastructure failures ({out / 'unfinished'})"
        if stages else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
