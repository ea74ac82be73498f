"""NeMo Gym's `terminus_judge`: is the policy's next Terminus action the teacher's (`expected_answer`)?
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

As NeMo Gym's `resources_servers/terminus_judge/app.py`: schema checks, then keystroke similarity (string-only at 0.9
by default, each side cut to `max_similarity_chars`, in `similarity_workers` threads), then an optional LLM judge.
Judge prompt: `terminus_judge_prompt.txt` beside this module.
The twelve checks and the similarity cost: docs/reward-server.md#the-environments-check-by-check.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Optional, Union

from pydantic import ConfigDict, Field

from common.terminus_actions import (MAX_SIMILARITY_CHARS, SCHEMAS, answer_text, json_object, keystrokes,
                                     schema_errors)
from rewards.environments.base import HERE, Environment, EnvironmentConfig, base_fields
from rewards.judge import JudgeError
from rewards.protocol import VerifyRequest, all_assistant_text, dump_create_params

logger = logging.getLogger(__name__)

REPO = HERE.parents[1]


class TerminusJudgeConfig(EnvironmentConfig):
    """NeMo Gym's `TerminusJudgeResourcesServerConfig` knobs (judge server and sampling in `judge_params`)."""

    judge_switch = "enable_llm_judge"

    enable_string_similarity: bool = True
    string_similarity_threshold: float = 0.9
    enable_llm_judge: bool = False
    check_twice_swap: bool = False
    reward_if_swap_fails: float = 0.0
    judge_system_message: Optional[str] = None
    judge_prompt_template: Optional[str] = None  # inline; wins over the file
    judge_prompt_template_fpath: str = str(HERE / "terminus_judge_prompt.txt")
    judge_equal_label: str = "[[A=B]]"
    judge_not_equal_label: str = "[[A!=B]]"
    judge_params: dict[str, Any] = Field(default_factory=dict)  # chat-completions sampling keys (max_tokens, ...)
    # ours, not NeMo Gym's: the similarity's cost bound (characters per side) and the threads that compute it
    max_similarity_chars: int = Field(MAX_SIMILARITY_CHARS, ge=1)
    similarity_workers: int = Field(2, ge=1)

    def prompt_template(self) -> str:
        if self.judge_prompt_template is not None:
            return self.judge_prompt_template.strip()
        path = Path(self.judge_prompt_template_fpath)
        if not path.is_absolute() and not path.exists():  # relative to the repo, wherever the server runs
            path = REPO / path
        return path.read_text().strip()

    def prompt_templates(self) -> list[tuple[str, str, tuple[str, ...]]]:
        if not self.enable_llm_judge:
            return []
        try:
            template = self.prompt_template()
        except OSError as err:
            raise ValueError(f"terminus_judge.judge_prompt_template_fpath: {err}") from None
        return [("terminus_judge judge prompt", template, ("expected_answer", "generated_answer"))]


class TerminusJudgeRequest(VerifyRequest):
    model_config = ConfigDict(extra="allow")

    uuid: Optional[Union[str, int]] = None
    expected_answer: Optional[str] = None  # a JSON *string*; an object is a 422, as in NeMo Gym
    metadata: Optional[dict[str, Any]] = None
    threshold: Optional[float] = None


def command_similarity(expected: dict, predicted: dict, max_chars: Optional[int] = None) -> tuple[float, bool]:
    """NeMo Gym's ratio of the concatenated keystrokes, each side cut to `max_chars` first; and whether one was."""
    gold, pred = keystrokes(expected), keystrokes(predicted)
    if not gold and not pred:
        return 1.0, False
    if not gold or not pred:
        return 0.0, False
    a, b = "".join(gold), "".join(pred)
    truncated = max_chars is not None and (len(a) > max_chars or len(b) > max_chars)
    if truncated:
        a, b = a[:max_chars], b[:max_chars]
    return SequenceMatcher(None, a, b).ratio(), truncated


def task_complete_ok(predicted: dict, expected: dict) -> bool:
    """One-way: fails only when the gold says complete and the prediction does not."""
    if "task_complete" in expected and expected["task_complete"]:
        if "task_complete" not in predicted or not predicted["task_complete"]:
            return False
    elif "is_task_complete" in expected and expected["is_task_complete"]:
        if "is_task_complete" not in predicted or not predicted["is_task_complete"]:
            return False
    return True


def parse_verdict(text: str, equal: str, not_equal: str) -> tuple[bool, Optional[str]]:
    """The rightmost label in the last 200 characters; failing that, the first label in the whole text."""
    tail = text[-200:] if len(text) > 200 else text
    eq, neq = tail.rfind(equal), tail.rfind(not_equal)
    if eq >= 0 or neq >= 0:
        if eq >= 0 and (neq < 0 or eq > neq):
            return True, equal
        if neq >= 0:
            return False, not_equal
    eq, neq = text.find(equal), text.find(not_equal)
    if eq >= 0 and (neq < 0 or eq < neq):
        return True, equal
    if neq >= 0:
        return False, not_equal
    return False, None


def expected_answer_of(request: TerminusJudgeRequest) -> Optional[str]:
    if request.expected_answer:
        return str(request.expected_answer)
    value = (request.metadata or {}).get("expected_answer")
    return str(value) if value is not None else None


class TerminusJudge(Environment):
    name = "terminus_judge"
    request_model = TerminusJudgeRequest
    config_model = TerminusJudgeConfig
    agent_refs = ("terminus_judge_simple_agent", "terminus_judge_string_only_simple_agent")

    def __init__(self, config, judge):
        super().__init__(config, judge)
        self.template = config.prompt_template() if config.enable_llm_judge else None
        self._pool: Optional[ThreadPoolExecutor] = None
        self._slots = asyncio.Semaphore(config.similarity_workers)  # ratios queued in the pool at most

    async def _similarity(self, expected: dict, predicted: dict) -> tuple[float, bool]:
        """`command_similarity` in the thread pool: the event loop keeps serving while it runs. A slot is held
        until the thread is done, even when the verify is cancelled (its deadline) while the ratio runs, so no
        more than `similarity_workers` ratios are ever queued or running."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.config.similarity_workers, thread_name_prefix="similarity")
        loop = asyncio.get_running_loop()
        await self._slots.acquire()
        try:
            job = self._pool.submit(command_similarity, expected, predicted, self.config.max_similarity_chars)
        except BaseException:
            self._slots.release()
            raise

        def release(_job) -> None:
            try:
                loop.call_soon_threadsafe(self._slots.release)
            except RuntimeError:  # the loop is closed (shutdown)
                pass

        job.add_done_callback(release)
        return await asyncio.wrap_future(job)

    async def aclose(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def verify(self, request: TerminusJudgeRequest, raw: dict) -> dict:
        cfg = self.config
        state: dict[str, Any] = dict(reward=0.0, failure_reason="none", parsed_output=None, similarity_score=None,
                                     schema_check_passed=None, task_complete_check_passed=None,
                                     string_similarity_passed=None, judge_passed=None, judge_evaluations=[])

        def result(expected: str, model_output: str) -> dict:
            return {"responses_create_params": dump_create_params(request.responses_create_params),
                    "response": raw["response"], **base_fields(state["reward"], state["failure_reason"]),
                    "uuid": request.uuid, "expected_answer": expected, "model_output": model_output,
                    "parsed_output": state["parsed_output"], "similarity_score": state["similarity_score"],
                    "schema_check_passed": state["schema_check_passed"],
                    "task_complete_check_passed": state["task_complete_check_passed"],
                    "string_similarity_passed": state["string_similarity_passed"],
                    "judge_passed": state["judge_passed"], "judge_evaluations": state["judge_evaluations"],
                    "metadata": request.metadata, "threshold": request.threshold,
                    **({"similarity_truncated": True} if state.get("similarity_truncated") else {})}

        def fail(reason: str, expected: str, model_output: str) -> dict:
            state["failure_reason"] = reason
            return result(expected, model_output)

        expected = expected_answer_of(request)
        if not expected:
            return fail("expected_answer_invalid", "", "")
        generated = all_assistant_text(request.response)
        if not generated:
            return fail("model_output_invalid", expected, "")
        text = answer_text(generated)
        expected_dict = json_object(expected)
        if expected_dict is None:
            return fail("expected_answer_invalid", expected, text)
        predicted = json_object(text)
        if predicted is None:  # (too deep to parse: not a Terminus action either)
            return fail("model_output_invalid", expected, text)
        state["parsed_output"] = predicted
        harness = request.metadata.get("harness") if request.metadata else None
        if not isinstance(harness, str) or harness not in SCHEMAS:
            return fail("unknown_harness", expected, text)
        if schema_errors(expected_dict, harness) is not None:
            return fail("expected_answer_invalid", expected, text)
        if schema_errors(predicted, harness) is not None:
            state["schema_check_passed"] = False
            return fail("schema_check_failed", expected, text)
        state["schema_check_passed"] = True
        if not task_complete_ok(predicted, expected_dict):
            state["task_complete_check_passed"] = False
            return fail("task_complete_check_failed", expected, text)
        state["task_complete_check_passed"] = True

        try:
            need_judge = False
            if cfg.enable_string_similarity:
                state["similarity_score"], truncated = await self._similarity(expected_dict, predicted)
                if truncated:
                    state["similarity_truncated"] = True
                threshold = request.threshold if request.threshold is not None else cfg.string_similarity_threshold
                if state["similarity_score"] >= threshold:
                    state.update(string_similarity_passed=True, reward=1.0, failure_reason="none")
                else:
                    state["string_similarity_passed"] = False
                    need_judge = cfg.enable_llm_judge
                    if not need_judge:
                        state["failure_reason"] = "string_similarity_below_threshold"
            else:
                need_judge = cfg.enable_llm_judge
            if need_judge:
                await self._judge(state, expected=expected, generated=text)
            if not cfg.enable_string_similarity and not cfg.enable_llm_judge:
                state.update(reward=1.0, failure_reason="none")
        except JudgeError:
            raise
        except Exception as err:  # NeMo Gym's unknown_error: reward stays as it was
            logger.error("terminus_judge uuid=%s unknown error: %s: %s", request.uuid, type(err).__name__, err)
            state["failure_reason"] = "unknown_error"
        return result(expected, text)

    async def _judge(self, state: dict, *, expected: str, generated: str) -> None:
        cfg = self.config
        first_equal, first = await self._evaluate(expected, generated)
        state["judge_evaluations"].append(first)
        if first["verdict_label"] is None:
            state.update(failure_reason="judge_parsing_failed", reward=0.0)
        elif first_equal:
            if cfg.check_twice_swap:
                second_equal, second = await self._evaluate(generated, expected)
                state["judge_evaluations"].append(second)
                if second["verdict_label"] is None:
                    state.update(failure_reason="judge_swap_parsing_failed", reward=0.0)
                elif second_equal:
                    state.update(judge_passed=True, reward=1.0, failure_reason="none")
                else:
                    state.update(judge_passed=False, reward=cfg.reward_if_swap_fails,
                                 failure_reason="judge_not_equivalent")
            else:
                state.update(judge_passed=True, reward=1.0, failure_reason="none")
        else:
            state.update(judge_passed=False, failure_reason="judge_not_equivalent", reward=0.0)

    async def _evaluate(self, expected: str, generated: str) -> tuple[bool, dict]:
        cfg = self.config
        prompt = self.template.format(expected_answer=expected, generated_answer=generated)
        messages = ([{"role": "system", "content": cfg.judge_system_message}] if cfg.judge_system_message else [])
        messages.append({"role": "user", "content": prompt})
        reply = await self.judge.chat(messages, cfg.judge_params)
        equal, label = (False, None)
        if reply.text:
            equal, label = parse_verdict(reply.text, cfg.judge_equal_label, cfg.judge_not_equal_label)
        return equal, {"responses_create_params": reply.request, "response": reply.response, "verdict_label": label}
