"""NeMo Gym's `multichallenge`: a YES/NO judge call per rubric item, aggregated.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

As NeMo Gym's `resources_servers/multichallenge/app.py`; config `multichallenge: {...}` (NeMo Gym's
`MultiChallengeConfig` defaults), judge prompt `multichallenge_prompt.txt` beside this module. One failed judge call
masks the sample (`judge_failed`).
The verdict parsing and aggregations: docs/reward-server.md#the-environments-check-by-check.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from common.errors import RequestError
from rewards.environments.base import Environment, EnvironmentConfig, base_fields, read_prompt
from rewards.protocol import VerifyRequest, last_assistant_text, strip_thinking


class MultiChallengeConfig(EnvironmentConfig):
    """NeMo Gym's `MultiChallengeConfig` (class defaults)."""

    aggregation_mode: Literal["mean", "min", "max", "all", "any", "weighted"] = "mean"
    parallel_evaluation: bool = True
    judge_prompt_template: str = read_prompt("multichallenge_prompt.txt")
    judge_system_message: Optional[str] = (
        "You are a precise evaluator. Assess responses objectively based on the given criteria.")
    yes_label: str = "[[YES]]"
    no_label: str = "[[NO]]"
    judge_params: dict[str, Any] = Field(default_factory=dict)

    def prompt_templates(self) -> list[tuple[str, str, tuple[str, ...]]]:
        return [("multichallenge.judge_prompt_template", self.judge_prompt_template,
                 ("context", "response", "question", "pass_criteria"))]


class RubricItem(BaseModel):
    model_config = ConfigDict(extra="allow")

    question: str = ""
    pass_criteria: str = "YES"
    weight: float = 1.0


class ContextMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Any = "unknown"
    content: Any = ""


class MultiChallengeRequest(VerifyRequest):
    model_config = ConfigDict(extra="allow")

    uuid: Optional[Union[str, int]] = None
    task_id: Optional[int] = None
    rubric: Optional[list[RubricItem]] = None
    context: Optional[str] = None
    metadata: Optional[dict[str, Any]] = None


def build_context(messages: list[ContextMessage]) -> str:
    return "\n\n".join(f"[{str(m.role).upper()}]: {m.content}" for m in messages if m.role != "thinking")


def extract_verdict(text: str, yes: str, no: str) -> str:
    yes_pos, no_pos = text.rfind(yes), text.rfind(no)
    if yes_pos < 0 and no_pos < 0:
        lines = text.strip().split("\n")
        last = lines[-1].strip().upper() if lines else ""
        if "YES" in last:
            return "YES"
        return "NO"
    return "YES" if yes_pos > no_pos else "NO"


def score(verdict: str, pass_criteria: str) -> float:
    if pass_criteria.upper() == "NO":
        return 1.0 if verdict == "NO" else 0.0
    return 1.0 if verdict == "YES" else 0.0


def aggregate(mode: str, scores: list[float], weights: list[float]) -> float:
    if not scores:
        return 0.0
    if mode == "mean":
        return sum(scores) / len(scores)
    if mode == "min":
        return min(scores)
    if mode == "max":
        return max(scores)
    if mode == "all":
        return 1.0 if all(s >= 0.99 for s in scores) else 0.0
    if mode == "any":
        return 1.0 if any(s >= 0.99 for s in scores) else 0.0
    if mode == "weighted":
        total = sum(weights)
        return 0.0 if total == 0 else sum(s * w for s, w in zip(scores, weights)) / total
    return 0.0


def _fallback(metadata: dict, key: str, model: type[BaseModel]) -> list:
    value = metadata[key]
    if not isinstance(value, list):
        raise RequestError(f"metadata.{key}: must be a list of objects", status=422, param=f"metadata.{key}")
    try:
        return [model.model_validate(item) for item in value]
    except ValidationError as err:
        first = err.errors()[0]
        raise RequestError(f"metadata.{key}: {'.'.join(map(str, first['loc']))}: {first['msg']}", status=422,
                           param=f"metadata.{key}") from None


class MultiChallenge(Environment):
    name = "multichallenge"
    request_model = MultiChallengeRequest
    config_model = MultiChallengeConfig
    agent_refs = ("multichallenge_simple_agent",)

    async def verify(self, request: MultiChallengeRequest, raw: dict) -> dict:
        cfg = self.config
        response_text = strip_thinking(last_assistant_text(request.response) or "")
        metadata = request.metadata or {}
        context = request.context or ""
        if not context and "messages" in metadata:
            context = build_context(_fallback(metadata, "messages", ContextMessage))
        rubric = request.rubric or []
        if not rubric and "rubric" in metadata:
            rubric = _fallback(metadata, "rubric", RubricItem)

        items = [self._evaluate(item, context, response_text) for item in rubric]
        if cfg.parallel_evaluation and len(items) > 1:
            outcomes = await asyncio.gather(*items, return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
            evaluations = list(outcomes)
        else:
            evaluations = []
            try:
                for item in items:
                    evaluations.append(await item)
            finally:
                for item in items[len(evaluations) + 1:]:
                    item.close()
        reward = aggregate(cfg.aggregation_mode, [e["score"] for e in evaluations], [e["weight"] for e in evaluations])
        return {**self.dump(request, raw, exclude=frozenset({"context", "rubric"})), **base_fields(reward),
                "context": context, "generated_response": response_text, "rubric_evaluations": evaluations,
                "aggregation_mode": cfg.aggregation_mode,
                "num_passed": sum(1 for e in evaluations if e["score"] >= 0.99), "num_total": len(evaluations)}

    async def _evaluate(self, item: RubricItem, context: str, response: str) -> dict:
        cfg = self.config
        prompt = cfg.judge_prompt_template.format(context=context, response=response, question=item.question,
                                                  pass_criteria=item.pass_criteria)
        messages = ([{"role": "system", "content": cfg.judge_system_message}] if cfg.judge_system_message else [])
        messages.append({"role": "user", "content": prompt})
        reply = await self.judge.chat(messages, cfg.judge_params)
        judge_text = strip_thinking(reply.text)
        verdict = extract_verdict(judge_text, cfg.yes_label, cfg.no_label)
        return {"question": item.question, "pass_criteria": item.pass_criteria, "judge_prompt": prompt,
                "judge_response": judge_text, "verdict": verdict, "score": score(verdict, item.pass_criteria),
                "weight": item.weight}
