"""`terminus_functional`: is the policy's next Terminus action as good as the teacher's, judged by what it does?
Runs in: the reward server's process, in the training venv (the local sandbox: Linux namespaces, harbor_tasks).

For a row that names its task (`metadata.task_dir`, the teacher's keystrokes before this turn in
`metadata.prefix_keystrokes` and after it in `metadata.remaining_keystrokes`, as `python -m trainers.data pivots
--environment terminus_functional` writes them) the decision point is rebuilt in a fresh local sandbox twice, the
teacher's action run in one and the policy's in the other (harbor_tasks/decision_point.py), then:
- the teacher's action changed the workdir: 1 when the policy's leaves the same workdir, 0 when it changes nothing,
  else 1 when the teacher's remaining work on the state it leaves passes the task's tests;
- the teacher's action only looked: a policy action that changes the workdir is judged by that continuation; one that
  looks is 1 when its last `screen_lines` show every value the teacher's look revealed and its later work types.
Tamper evidence during the tests is 0; a sandbox that fails, or a row whose own teacher work no longer passes here,
is masked (`failure_kind` sandbox / prefix_replay), never 0. A row without a task is scored by terminus_judge (its
string similarity, then its LLM judge where configured). Rules and attacks: docs/reward-server.md#terminus_functional.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from common.errors import RequestError
from common.terminus_actions import SCHEMAS, answer_text, json_object, keystrokes, schema_errors
from harbor_tasks.decision_point import DecisionPoint, Played, PlayLimits
from harbor_tasks.verdict import passed
from rewards.environments.base import Environment, EnvironmentConfig, base_fields
from rewards.environments.terminus_judge import (TerminusJudge, TerminusJudgeConfig, TerminusJudgeRequest,
                                                 expected_answer_of, task_complete_ok)
from rewards.protocol import all_assistant_text, dump_create_params
from sandbox import SandboxError

VALUE = re.compile(r"[A-Za-z0-9_.:/=+@%-]{2,}")  # a word a command can carry: a path, an id, a name, a number


class TerminusFunctionalConfig(EnvironmentConfig):
    """The functional judge's knobs; `fallback`: terminus_judge's, for rows without a task."""

    # a row's task_dir prefix -> this server's folder, for rows built on another machine (longest prefix first)
    task_roots: dict[str, str] = Field(default_factory=dict)
    command_timeout_sec: float = Field(30.0, gt=0)  # the earlier commands, the action, the remaining work: each
    memory_mb: int = Field(1024, ge=64)
    storage_mb: int = Field(1024, ge=16)
    screen_lines: int = Field(40, ge=1)  # of a looking action's output, what counts as shown (a Terminus-2 screen)
    workers: int = Field(4, ge=1)  # sandboxes played at once (they wait on process starts: 4 beat 2 on 2 cores)
    teacher_cache: int = Field(1024, ge=0)  # decision points whose teacher side is kept (a GRPO group shares one)
    fallback: TerminusJudgeConfig = Field(default_factory=TerminusJudgeConfig)

    @property
    def needs_judge(self) -> bool:
        return self.fallback.needs_judge

    def prompt_templates(self) -> list[tuple[str, str, tuple[str, ...]]]:
        return self.fallback.prompt_templates()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict)
                         and isinstance(part.get("text"), str))
    return ""


def words(text: str) -> list[str]:
    """The values a text carries: its VALUE words, and the pieces of each between `/` and `=` (a path's parts, the
    two sides of `s/old/new/` and `key=value`)."""
    out = []
    for word in VALUE.findall(text):
        out.append(word)
        out += [piece for piece in re.split(r"[/=]", word) if len(piece) >= 2 and piece != word]
    return out


def revealed_values(shown: str, later: list[str], before: str) -> list[str]:
    """The words of the teacher's later keystrokes that its look showed and nothing before it did (the prompt):
    what the look found out."""
    seen_before, shown_words = set(words(before)), set(words(shown))
    found: list[str] = []
    for word in words(" ".join(later)):
        if word in shown_words and word not in seen_before and word not in found:
            found.append(word)
    return found


def last_lines(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


class TerminusFunctional(Environment):
    name = "terminus_functional"
    request_model = TerminusJudgeRequest
    config_model = TerminusFunctionalConfig
    agent_refs = ("terminus_functional_simple_agent",)

    def __init__(self, config: TerminusFunctionalConfig, judge):
        super().__init__(config, judge)
        self.fallback = TerminusJudge(config.fallback, judge)
        self.limits = PlayLimits(command_timeout_sec=config.command_timeout_sec, memory_mb=config.memory_mb,
                                 storage_mb=config.storage_mb)
        self._pool: Optional[ThreadPoolExecutor] = None
        self._teacher: OrderedDict[str, Played] = OrderedDict()
        self._teacher_lock = threading.Lock()
        self._keys_lock: dict[str, threading.Lock] = {}

    async def aclose(self) -> None:
        await self.fallback.aclose()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # --- the row --------------------------------------------------------------------------------------------------
    def task_dir(self, value: Any) -> Path:
        """The row's task folder on this server (task_roots applied); a 422 naming the key when there is none."""
        if not isinstance(value, str) or not value:
            raise RequestError("metadata.task_dir: must be a task folder's path", 422, "metadata.task_dir")
        mapped = value
        for source in sorted(self.config.task_roots, key=len, reverse=True):
            if value == source or value.startswith(source.rstrip("/") + "/"):
                mapped = self.config.task_roots[source].rstrip("/") + value[len(source.rstrip("/")):]
                break
        path = Path(mapped)
        if not (path / "tests" / "test.sh").is_file() or not (path / "environment").is_dir():
            hint = f" (mapped from {value} by task_roots)" if mapped != value else ""
            raise RequestError(f"metadata.task_dir: {mapped}{hint} is not a task folder on this server (no "
                               "tests/test.sh or environment/); copy the tasks here or map the row's folder with "
                               "terminus_functional.task_roots in the server config", 422, "metadata.task_dir")
        return path

    @staticmethod
    def keystroke_list(metadata: dict, key: str) -> list[str]:
        value = metadata.get(key, [])
        if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
            raise RequestError(f"metadata.{key}: must be a list of keystroke strings", 422, f"metadata.{key}")
        return value

    # --- verify ---------------------------------------------------------------------------------------------------
    async def verify(self, request: TerminusJudgeRequest, raw: dict) -> dict:
        metadata = request.metadata or {}
        if "task_dir" not in metadata:
            return await self.fallback.verify(request, raw)
        task = self.task_dir(metadata["task_dir"])
        prefix = self.keystroke_list(metadata, "prefix_keystrokes")
        remaining = self.keystroke_list(metadata, "remaining_keystrokes")
        details: dict[str, Any] = {}

        def result(reward: float, reason: str, expected: str = "", text: str = "", mask_kind: str | None = None):
            out = {"responses_create_params": dump_create_params(request.responses_create_params),
                   "response": raw["response"], **base_fields(reward, reason), "uuid": request.uuid,
                   "expected_answer": expected, "model_output": text, "metadata": request.metadata,
                   "functional": details}
            if mask_kind is not None:
                out.update(mask_sample=True, failure_kind=mask_kind)
            return out

        expected = expected_answer_of(request) or ""
        teacher_action = json_object(expected)
        harness = metadata.get("harness", "terminus_2")
        if harness not in SCHEMAS or teacher_action is None or schema_errors(teacher_action, harness):
            raise RequestError("expected_answer: must be the teacher's Terminus action as a JSON string (the row's "
                               "metadata.harness names its schema)", 422, "expected_answer")
        generated = all_assistant_text(request.response)
        text = answer_text(generated)
        action = json_object(text)
        if action is None:
            return result(0.0, "model_output_invalid", expected, text)
        if schema_errors(action, harness) is not None:
            return result(0.0, "schema_check_failed", expected, text)
        if not task_complete_ok(action, teacher_action):
            return result(0.0, "task_complete_check_failed", expected, text)
        policy_keys, teacher_keys = keystrokes(action), keystrokes(teacher_action)
        completes_early = bool(action.get("task_complete")) and not teacher_action.get("task_complete")
        if policy_keys == teacher_keys and not completes_early:  # the teacher's own keystrokes: its own effect
            details["judged_by"] = "same_keystrokes"
            return result(1.0, "none", expected, text)

        before = "\n".join(_text(m.get("content")) for m in raw["responses_create_params"].get("input", [])
                           if isinstance(m, dict))
        point = DecisionPoint(task, prefix, self.limits)
        try:
            teacher = await self._in_pool(self._teacher_side, point, teacher_keys, remaining)
            if teacher.verdict is not None and teacher.verdict.infra_kind is not None:
                return result(0.0, f"{teacher.verdict.infra_kind}: {teacher.verdict.detail}", expected, text,
                              mask_kind=teacher.verdict.infra_kind)
            if not passed(teacher.verdict.score if teacher.verdict else None):
                details["teacher_verdict"] = teacher.verdict.outcome if teacher.verdict else None
                return result(0.0, "the teacher's own work from this decision point does not pass the task's tests "
                              "here (the row no longer replays)", expected, text, mask_kind="prefix_replay")
            # the rest of the work and the tests only where they decide: an action that changed the workdir
            # otherwise than the teacher's, or one that marks the task complete
            policy = await self._in_pool(point.play, policy_keys, [] if completes_early else remaining,
                                         lambda before, after: completes_early or (after != before
                                                                                     and after != teacher.after))
        except (SandboxError, OSError) as err:
            return result(0.0, f"sandbox: {type(err).__name__}: {err}", expected, text, mask_kind="sandbox")
        verdict = policy.verdict
        details.update(teacher_changed=teacher.changed, policy_changed=policy.changed, seconds=policy.seconds)
        if verdict is not None and verdict.infra_kind is not None:
            return result(0.0, f"{verdict.infra_kind}: {verdict.detail}", expected, text, mask_kind=verdict.infra_kind)
        if verdict is not None and verdict.tamper:
            details["tamper"] = [kind for kind, _ in verdict.tamper]
            return result(0.0, "tamper_evidence", expected, text)
        if policy.timed_out:
            return result(0.0, "action_timed_out", expected, text)
        tests_pass = verdict is not None and passed(verdict.score)
        if completes_early:  # marking the task complete here ends the episode: judged by the tests now
            details["judged_by"] = "tests_at_completion"
            return result(float(tests_pass), "none" if tests_pass else "completed_before_the_work", expected, text)
        if teacher.changed and policy.after == teacher.after:
            details["judged_by"] = "same_state"
            return result(1.0, "none", expected, text)
        if teacher.changed and not policy.changed:
            details["judged_by"] = "no_effect"
            return result(0.0, "no_effect_where_the_work_needs_one", expected, text)
        if policy.changed:
            details["judged_by"] = "continuation"
            return result(float(tests_pass), "none" if tests_pass else "continuation_fails_the_tests", expected, text)
        wanted = revealed_values(teacher.output, remaining, before)
        shown = last_lines(policy.output, self.config.screen_lines)
        on_screen = set(words(shown))
        missing = [word for word in wanted if word not in on_screen]
        details.update(judged_by="shown", revealed=wanted, missing=missing)
        return result(0.0 if missing else 1.0, "not_shown" if missing else "none", expected, text)

    # --- the sandboxes --------------------------------------------------------------------------------------------
    async def _in_pool(self, fn, *args):
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.config.workers, thread_name_prefix="functional")
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _teacher_side(self, point: DecisionPoint, teacher_keys: list[str], remaining: list[str]) -> Played:
        """The teacher's action played at `point` (its remaining work and the tests after it), once per decision
        point while it stays in the cache: a GRPO group's samples share it."""
        key = hashlib.sha256(json.dumps([str(point.task.path.resolve()), point.prefix, teacher_keys, remaining])
                             .encode()).hexdigest()
        with self._teacher_lock:
            if key in self._teacher:
                self._teacher.move_to_end(key)
                return self._teacher[key]
            lock = self._keys_lock.setdefault(key, threading.Lock())
        with lock:  # the samples of one group wait for the first to play it
            with self._teacher_lock:
                if key in self._teacher:
                    return self._teacher[key]
            try:
                played = point.play(teacher_keys, remaining)
                with self._teacher_lock:
                    if self.config.teacher_cache:
                        self._teacher[key] = played
                        while len(self._teacher) > self.config.teacher_cache:
                            self._teacher.popitem(last=False)
            finally:
                with self._teacher_lock:
                    self._keys_lock.pop(key, None)
        return played
