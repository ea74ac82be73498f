"""``BashToolAgent`` (``eval.run --agent bash-tool``): the bash-tool harness agentic GRPO trains, as a Harbor agent.
Runs in: the Harbor venv (.venv-harbor, Python >= 3.12), loaded by Harbor by import path, inside the harbor process.

The prompt, the one ``bash`` tool and what a call returns are common/bash_harness.py's, as the trainer's; the loop
POSTs OpenAI chat completions (``tools=[bash]``) to ``{api_base}/chat/completions`` until an answer without a tool
call or ``max_turns``, and writes ``trajectory.json`` (ATIF, the tool in ``agent.tool_definitions``).
The loop, its errors and the command line: docs/agentic-grpo.md#evals-in-the-same-harness.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from datetime import datetime, timezone
from typing import Any

import httpx
from harbor.agents.base import BaseAgent
from harbor.agents.capabilities import AgentCapabilities
from harbor.agents.options import AgentOptions
from harbor.environments.base import BaseEnvironment
from harbor.llms.base import ContextLengthExceededError
from harbor.models.agent.context import AgentContext
from harbor.models.trajectories import (
    Agent,
    FinalMetrics,
    Metrics,
    Observation,
    ObservationResult,
    Step,
    ToolCall,
    Trajectory,
)
from harbor.utils.trajectory_utils import format_trajectory_json
from pydantic import Field

from common.bash_harness import (
    BASH_TOOL,
    DEFAULT_COMMAND_TIMEOUT_SEC,
    DEFAULT_MAX_OUTPUT_CHARS,
    call_error,
    format_output,
    harness_prompt,
    timeout_message,
)
from common.harnesses import BASH_TOOL_HARNESS

__all__ = ["BashToolAgent", "ModelCallError"]

NAME = BASH_TOOL_HARNESS
PROVIDER_PREFIXES = ("hosted_vllm/", "openai/")
# the phrases by which Harbor's LiteLLM wrapper recognises a context overflow in a 400 (vLLM's, OpenAI's, ours)
CONTEXT_PHRASES = ("maximum context length", "context length exceeded", "context_length_exceeded",
                   "model's context length", "prompt is too long")
ATTEMPTS = 3


class ModelCallError(RuntimeError):
    """The model's server failed a chat completion (an HTTP error, unreachable, or an answer of another shape)."""


class BashToolOptions(AgentOptions):
    api_base: str | None = Field(default=None, description="OpenAI-compatible base URL (http://HOST:PORT/v1).")
    temperature: float | None = Field(default=None, description="Sampling temperature (default: the server's).")
    max_tokens: int | None = Field(default=None, description="Max tokens per model call (default: the server's).")
    max_turns: int | None = Field(default=None, description=(
        "Model calls per trial; the last one's tool calls are not run. Default: no limit but the agent timeout."))
    command_timeout_sec: float = Field(default=DEFAULT_COMMAND_TIMEOUT_SEC,
                                       description="Seconds one bash call may run.")
    max_output_chars: int = Field(default=DEFAULT_MAX_OUTPUT_CHARS, description="Characters of a call's output kept.")
    enable_thinking: bool | None = Field(default=False, description=(
        "chat_template_kwargs.enable_thinking sent to the server (null: not sent)."))
    request_timeout_sec: float = Field(default=600.0, description="Seconds one model call may take.")
    extra_body: dict[str, Any] | None = Field(default=None, description="More fields of every request body.")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def served_name(model_name: str) -> str:
    """The model name the server expects: `-m`'s without LiteLLM's provider prefix."""
    for prefix in PROVIDER_PREFIXES:
        if model_name.startswith(prefix):
            return model_name[len(prefix):]
    return model_name


def reasoning_of(message: dict) -> str | None:
    """A chat completion message's reasoning: `reasoning_content` (our CPU server, Harbor's LiteLLM) or `reasoning`
    (vLLM's newer field); None when there is none."""
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str) and message[key]:
            return message[key]
    return None


def _arguments(call: dict) -> tuple[dict | None, str | None]:
    """A tool call's arguments (OpenAI: a JSON string; some servers send the object) and the error if unreadable."""
    raw = (call.get("function") or {}).get("arguments")
    if isinstance(raw, dict):
        return raw, None
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except json.JSONDecodeError as err:
        return None, str({"error": f"the arguments are not valid JSON: {err}"})
    return value, None


def _atif_call(call: dict, arguments: dict | None) -> ToolCall:
    """A tool call as ATIF records it (arguments an object; unreadable ones kept as they came, in `extra`)."""
    function = call.get("function") or {}
    return ToolCall(tool_call_id=call["id"], function_name=str(function.get("name")),
                    arguments=arguments if isinstance(arguments, dict) else {},
                    extra=None if isinstance(arguments, dict) else {"raw_arguments": function.get("arguments")})


class BashToolAgent(BaseAgent):
    capabilities = AgentCapabilities(atif=True)
    options_model = BashToolOptions
    options: BashToolOptions

    def __init__(self, logs_dir, model_name: str | None = None, *args, **kwargs):
        super().__init__(logs_dir, model_name, *args, **kwargs)
        if not model_name:
            raise ValueError("the bash-tool agent needs a model: -m hosted_vllm/NAME --ak api_base=http://HOST:PORT/v1")
        if not self.options.api_base:
            raise ValueError("the bash-tool agent needs --ak api_base=http://HOST:PORT/v1 (an OpenAI-compatible URL)")
        self._model = served_name(model_name)
        self._url = self.options.api_base.rstrip("/") + "/chat/completions"

    @staticmethod
    def name() -> str:
        return NAME

    def version(self) -> str | None:
        return "1.0.0"

    async def setup(self, environment: BaseEnvironment) -> None:
        pass  # nothing to install: every call is a plain `bash -c` in the environment

    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        prompt = harness_prompt(instruction)
        messages: list[dict] = [{"role": "user", "content": prompt}]
        steps = [Step(step_id=1, timestamp=_now(), source="user", message=prompt)]
        usage = {"prompt": 0, "completion": 0, "tool_calls": 0, "request_msec": []}
        ended = "interrupted"  # by a model error or the agent timeout, unless set below
        try:
            async with httpx.AsyncClient(timeout=self.options.request_timeout_sec) as client:
                for turn in itertools.count(1):
                    message, tokens = await self._complete(client, messages, usage)
                    content = message.get("content") if isinstance(message.get("content"), str) else ""
                    calls = [{**call, "id": call.get("id") or f"call_{turn}_{i}"}
                             for i, call in enumerate(message.get("tool_calls") or []) if isinstance(call, dict)]
                    step = Step(step_id=len(steps) + 1, timestamp=_now(), source="agent", message=content,
                                model_name=self._model, reasoning_content=reasoning_of(message),
                                metrics=Metrics(prompt_tokens=tokens[0], completion_tokens=tokens[1]))
                    steps.append(step)
                    if not calls:
                        ended = "answer"
                        break
                    parsed = [_arguments(call) for call in calls]
                    step.tool_calls = [_atif_call(call, args) for call, (args, _) in zip(calls, parsed)]
                    messages.append({"role": "assistant", "content": content, "tool_calls": calls,
                                     **({"reasoning_content": step.reasoning_content} if step.reasoning_content
                                        else {})})
                    if self.options.max_turns is not None and turn >= self.options.max_turns:
                        ended = "max_turns"  # as TRL at max_tool_calling_iterations: this answer's calls never run
                        break
                    step.observation = Observation(results=[])
                    for call, (args, error) in zip(calls, parsed):
                        name = str((call.get("function") or {}).get("name"))
                        output = error or await self._bash(environment, name, args)
                        usage["tool_calls"] += 1
                        messages.append({"role": "tool", "tool_call_id": call["id"], "name": name, "content": output})
                        step.observation.results.append(ObservationResult(source_call_id=call["id"], content=output))
        finally:
            context.n_input_tokens = usage["prompt"]
            context.n_output_tokens = usage["completion"]
            context.n_cache_tokens = 0
            context.metadata = {"n_turns": len(steps) - 1, "tool_calls": usage["tool_calls"], "ended_by": ended,
                                "api_request_times_msec": usage["request_msec"]}
            self._dump_trajectory(steps, usage)

    # --- the model ------------------------------------------------------------------------------------------
    async def _complete(self, client: httpx.AsyncClient, messages: list[dict], usage: dict) -> tuple[dict, tuple]:
        """One chat completion: its assistant message and (prompt, completion) tokens, also added to `usage`."""
        body: dict[str, Any] = {"model": self._model, "messages": messages, "tools": [BASH_TOOL]}
        if self.options.temperature is not None:
            body["temperature"] = self.options.temperature
        if self.options.max_tokens is not None:
            body["max_tokens"] = self.options.max_tokens
        if self.options.enable_thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": self.options.enable_thinking}
        body.update(self.options.extra_body or {})
        key = self._get_env("HOSTED_VLLM_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        started = time.monotonic()
        for attempt in range(1, ATTEMPTS + 1):
            try:
                response = await client.post(self._url, json=body, headers=headers)
            except httpx.TransportError as err:
                if attempt == ATTEMPTS:
                    raise ModelCallError(f"POST {self._url}: {type(err).__name__}: {err} ({ATTEMPTS} tries)") from err
            else:
                if response.status_code < 500 or attempt == ATTEMPTS:
                    break
            await asyncio.sleep(2 ** (attempt - 1))
        usage["request_msec"].append(round((time.monotonic() - started) * 1000, 1))
        if response.status_code == 400 and any(p in response.text.lower() for p in CONTEXT_PHRASES):
            raise ContextLengthExceededError(f"POST {self._url}: {response.text[:500]}")
        if response.status_code != 200:
            raise ModelCallError(f"POST {self._url}: HTTP {response.status_code}: {response.text[:500]}")
        try:
            data = response.json()
            message = data["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise ModelCallError(f"POST {self._url}: not a chat completion ({err}): {response.text[:300]}") from None
        counts = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = (int(counts.get("prompt_tokens") or 0), int(counts.get("completion_tokens") or 0))
        usage["prompt"] += tokens[0]
        usage["completion"] += tokens[1]
        return message, tokens

    # --- the tool -------------------------------------------------------------------------------------------
    async def _bash(self, environment: BaseEnvironment, name: str, arguments: dict) -> str:
        """What the call returns to the model: the command's output as the trainer's TaskEnvironment.bash gives it,
        or the error TRL's tool loop writes for a call it cannot make."""
        error = call_error(name, arguments)
        if error is not None:
            return error
        timeout = self.options.command_timeout_sec
        try:
            result = await environment.exec(str(arguments["command"]), cwd=environment.task_env_config.workdir,
                                            timeout_sec=timeout)
        except TimeoutError:  # the local sandbox's SandboxExecTimeoutError, asyncio's: the command was killed
            return timeout_message(timeout)
        return format_output(result.stdout, result.stderr, result.return_code, self.options.max_output_chars)

    # --- the trajectory -------------------------------------------------------------------------------------
    def _dump_trajectory(self, steps: list[Step], usage: dict) -> None:
        trajectory = Trajectory(
            session_id=self.session_id or str(uuid.uuid4()),
            agent=Agent(name=self.name(), version=self.version() or "unknown", model_name=self._model,
                        tool_definitions=[BASH_TOOL],
                        extra={"harness": NAME, "temperature": self.options.temperature,
                               "max_tokens": self.options.max_tokens, "max_turns": self.options.max_turns,
                               "command_timeout_sec": self.options.command_timeout_sec,
                               "max_output_chars": self.options.max_output_chars,
                               "enable_thinking": self.options.enable_thinking}),
            steps=steps,
            final_metrics=FinalMetrics(total_prompt_tokens=usage["prompt"], total_completion_tokens=usage["completion"],
                                       total_cached_tokens=0, total_steps=len(steps)),
        )
        try:
            (self.logs_dir / "trajectory.json").write_text(format_trajectory_json(trajectory.to_json_dict()))
        except OSError as err:
            self.logger.error(f"bash-tool agent: could not write the trajectory: {err}")
