"""The GRPO side of the NeMo Gym reward protocol: an async TRL reward function that posts each completion to `/verify`.
Runs in: the trainer's process (the training venv: httpx); the URL is ours (rewards.server) or a NeMo Gym server.

A sample the server masks or that fails for good is returned as None (kept out of the advantage), never 0; so is
a reward that is not a finite JSON number. Retries, round-robin over URLs, which timeout wins and the stop after
`max_consecutive_failures`: docs/grpo.md. A completion's reasoning goes as a `reasoning` output item beside the
answer's `message`, as NeMo Gym's converter splits it for the policy's family (common/reasoning.py, docs/models.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import random
import threading
from collections import Counter
from dataclasses import dataclass, field

import httpx

from common.errors import UserError
from common.model_families import ModelFamily, UnknownFamily, family_of
from common.reasoning import reasoning_blocks
from rewards import HEALTH, TOKEN_ENV, VERIFY
from rewards.protocol import make_response

RETRYABLE_STATUS = {429, 500, 502, 503, 504}
logger = logging.getLogger(__name__)


class RewardServerUnavailable(UserError):
    """The reward server failed too many times in a row; training cannot go on without rewards."""


@dataclass
class RewardArguments:
    """Reward keys of the GRPO recipe's config (YAML or --key value)."""

    reward_url: str | None = field(default=None, metadata={"help": (
        "NeMo Gym compatible /verify server(s), comma-separated (requests are spread over them). None starts a "
        "local reward server on loopback for the run.")})
    reward_server_config: str | None = field(default=None, metadata={
        "help": "configs/rewards/*.yaml for the local reward server (only without reward_url)."})
    reward_environment: str | None = field(default=None, metadata={
        "help": "agent_ref.name given to rows that have none (e.g. terminus_judge_simple_agent)."})
    reward_timeout: float | None = field(default=None, metadata={"help": (
        "Seconds per /verify request. Unset: the server's verify_timeout (from its /health) plus 10 s, so that a "
        "slow judge comes back masked rather than failed; 60 s for a server that does not say.")})
    reward_retries: int = field(default=4, metadata={"help": "Retries per request (exponential backoff, jitter)."})
    reward_max_consecutive_failures: int = field(default=20, metadata={
        "help": "Stop the run after this many failed requests in a row."})
    reward_auth_token: str | None = field(default=None, metadata={
        "help": f"Bearer token of the reward server (default: ${TOKEN_ENV})."})
    max_prompt_length: int | None = field(default=None, metadata={
        "help": "Prompts longer than this many tokens are filtered out before training (and counted)."})

    def client_config(self, urls: list[str]) -> "RewardClientConfig":
        return RewardClientConfig(urls=urls, timeout=self.reward_timeout, retries=self.reward_retries,
                                  max_consecutive_failures=self.reward_max_consecutive_failures,
                                  auth_token=self.reward_auth_token or os.environ.get(TOKEN_ENV) or None)


@dataclass
class RewardClientConfig:
    urls: list[str]
    timeout: float | None = None  # seconds per request; None: the server's verify_timeout + timeout_margin
    timeout_margin: float = 10.0
    fallback_timeout: float = 60.0  # for a server whose /health says no verify_timeout
    retries: int = 4  # extra attempts after the first
    backoff: float = 0.5  # first backoff in seconds; doubles per retry, with full jitter
    max_backoff: float = 10.0
    max_consecutive_failures: int = 20
    max_connections: int = 256
    auth_token: str | None = None


@dataclass
class VerifyOutcome:
    reward: float | None  # None: masked or failed, kept out of the advantage
    status: str  # "ok", "masked", "failed"
    failure_kind: str | None = None
    details: dict = field(default_factory=dict)  # numeric fields of the verify response


class RewardClient:
    def __init__(self, config: RewardClientConfig):
        if not config.urls:
            raise ValueError("reward_url: at least one URL is needed")
        self.config = config
        self.urls = [url.rstrip("/") for url in config.urls]
        self._next = 0
        self._clients: dict[int, httpx.AsyncClient] = {}  # one pool per event loop
        self._lock = threading.Lock()
        self.consecutive_failures = 0
        self.counts: Counter = Counter()
        self.budgets: dict[str, float | None] = {}  # url -> the server's verify_timeout (None: it does not say)
        self.timeouts: dict[str, float] = {}  # url -> the per-request timeout used
        self._probe_locks: dict[tuple[int, str], asyncio.Lock] = {}

    def _client(self) -> httpx.AsyncClient:
        loop = id(asyncio.get_running_loop())
        if loop not in self._clients:
            headers = {"Authorization": f"Bearer {self.config.auth_token}"} if self.config.auth_token else {}
            limits = httpx.Limits(max_connections=self.config.max_connections,
                                  max_keepalive_connections=self.config.max_connections)
            self._clients[loop] = httpx.AsyncClient(timeout=self.config.timeout or self.config.fallback_timeout,
                                                    limits=limits, headers=headers)
        return self._clients[loop]

    def _pick_url(self) -> str:
        with self._lock:
            url = self.urls[self._next % len(self.urls)]
            self._next += 1
        return url

    async def timeout_for(self, url: str) -> float:
        """The per-request timeout for `url` (see the module's docstring); asks its /health once."""
        if url not in self.budgets:
            key = (id(asyncio.get_running_loop()), url)
            async with self._probe_locks.setdefault(key, asyncio.Lock()):
                if url not in self.budgets:
                    probed = await self._probe(url)
                    if probed is None:  # unreachable for now: ask again next time
                        return self.config.timeout or self.config.fallback_timeout
                    budget, judged = probed
                    self.budgets[url] = budget
                    set_ = self.config.timeout
                    if set_ is not None and budget is not None and set_ < budget and judged:
                        logger.warning("reward_timeout %g s is shorter than the verify_timeout of %s (%g s): samples "
                                       "whose judge is slow will fail (and be retried) instead of coming back masked; "
                                       "unset reward_timeout to follow the server", set_, url, budget)
        if url not in self.timeouts:
            budget = self.budgets[url]
            self.timeouts[url] = (self.config.timeout if self.config.timeout is not None else
                                  budget + self.config.timeout_margin if budget is not None else
                                  self.config.fallback_timeout)
        return self.timeouts[url]

    async def _probe(self, url: str) -> tuple[float | None, bool] | None:
        """(the server's verify_timeout, whether it calls a judge) from GET /health, (None, True) when it does not
        say; None when the server did not answer."""
        try:
            reply = await self._client().get(f"{url}{HEALTH}", timeout=10)
        except httpx.HTTPError:
            return None
        try:
            health = reply.json() if reply.status_code == 200 else {}
            budget, judged = health.get("verify_timeout"), health.get("judge", True) is not False
        except (ValueError, AttributeError):
            return None, True
        budget = _finite(budget)
        return (budget if budget is not None and budget > 0 else None), judged

    async def verify(self, row: dict, text: str, reasoning: list[str] | None = None) -> VerifyOutcome:
        body = dict(row, response=make_response(text, reasoning=reasoning))
        error = ""
        url = self._pick_url()
        for attempt in range(self.config.retries + 1):
            if attempt:
                delay = min(self.config.max_backoff, self.config.backoff * 2 ** (attempt - 1))
                await asyncio.sleep(random.uniform(0, delay))
                url = self._pick_url()
            try:
                reply = await self._client().post(f"{url}{VERIFY}", json=body, timeout=await self.timeout_for(url))
            except httpx.HTTPError as err:  # connection refused or dropped, timeouts
                error = f"{url}/verify: {type(err).__name__}: {err}"
                continue
            if reply.status_code in RETRYABLE_STATUS:
                error = f"{url}/verify: HTTP {reply.status_code}: {reply.text[:200]}"
                continue
            if reply.status_code != 200:  # a 4xx: this request will not get better by retrying
                error = f"{url}/verify: HTTP {reply.status_code}: {reply.text[:300]}"
                return self._failed("bad_request", error)
            try:
                result = reply.json()
                reward = result["reward"]
            except (ValueError, KeyError, TypeError):
                error = f"{url}/verify: the answer has no numeric 'reward': {reply.text[:200]}"
                return self._failed("bad_response", error)
            details = {k: _finite(v) for k, v in result.items() if k != "reward" and _finite(v) is not None}
            if result.get("mask_sample"):
                self.consecutive_failures = 0
                kind = result.get("failure_kind") or "masked"
                self.counts[f"masked/{kind}"] += 1
                return VerifyOutcome(None, "masked", kind, details)
            # one inf or NaN in a group poisons every advantage of the group (TRL): such a sample is failed, not
            # scored; so is a reward that is not a JSON number ("nan", "1.0", true, null)
            if not _is_number(reward):
                return self._failed("bad_reward_type", f"{url}/verify: 'reward' is not a number: {reply.text[:200]}")
            if _finite(reward) is None:
                return self._failed("non_finite_reward", f"{url}/verify: 'reward' is not finite: {reply.text[:200]}")
            reward = _finite(reward)
            self.consecutive_failures = 0
            self.counts["ok"] += 1
            reason = result.get("failure_reason")  # why a scored sample got its reward, e.g. schema_check_failed
            return VerifyOutcome(reward, "ok", None if reason in (None, "", "none") else str(reason), details)
        return self._failed("unreachable", error)

    def _failed(self, kind: str, error: str) -> VerifyOutcome:
        self.consecutive_failures += 1
        self.counts[f"failed/{kind}"] += 1
        if self.consecutive_failures >= self.config.max_consecutive_failures:
            raise RewardServerUnavailable(
                f"reward server failed {self.consecutive_failures} times in a row (last: {error}); check that it runs "
                f"and answers at {', '.join(self.urls)} (reward_url), or raise reward_max_consecutive_failures")
        return VerifyOutcome(None, "failed", kind, {"error": error})

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
        self._clients.clear()


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value) -> float | None:
    """A JSON number as a finite float; None for anything else (inf, NaN, an int too large for a float)."""
    if not _is_number(value):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def completion_text(completion) -> str:
    """TRL gives a string (standard data) or a list of messages (conversational): join the assistant texts."""
    if isinstance(completion, str):
        return completion
    return "\n".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


def completion_parts(completion, family: ModelFamily | None = None) -> tuple[list[str], str]:
    """(reasoning blocks, answer) of a TRL completion: a message's own reasoning field (a response schema's parse)
    and the blocks its family marks in the text (common/reasoning.py); no family: no blocks, the text as it is."""
    blocks: list[str] = []
    if not isinstance(completion, str):
        for message in completion:
            for key in ("reasoning_content", "reasoning", "thinking"):
                if message.get("role") == "assistant" and isinstance(message.get(key), str) and message[key]:
                    blocks.append(message[key])
    text = completion_text(completion)
    if family is None:
        return blocks, text
    marked, answer = reasoning_blocks(family, text)
    return blocks + marked, answer


def policy_family(tokenizer) -> ModelFamily | None:
    """The family of the policy's tokenizer (its chat template), None when the table cannot tell it: its
    completions then go to the server as they are (NeMo Gym's servers strip `</think>` themselves)."""
    try:
        return family_of(tokenizer)
    except UnknownFamily:
        return None


def make_reward_function(client: RewardClient, family: ModelFamily | None = None):
    """An async TRL reward function; the dataset's `row` column holds each NeMo Gym row as a JSON string; `family`:
    the policy's, whose reasoning goes as a reasoning item, apart from the answer."""

    async def verify(row: str, completion) -> VerifyOutcome:
        blocks, answer = completion_parts(completion, family)
        return await client.verify(json.loads(row), answer, blocks)

    async def nemo_gym_verify(prompts, completions, row, log_metric=None, log_extra=None, **kwargs):
        outcomes = await asyncio.gather(*(verify(r, c) for r, c in zip(row, completions)))
        if log_metric is not None:
            statuses = Counter(outcome.status for outcome in outcomes)
            for status in ("ok", "masked", "failed"):
                log_metric(f"reward_server/{status}_fraction", statuses[status] / len(outcomes))
            kinds = Counter(outcome.failure_kind for outcome in outcomes if outcome.failure_kind)
            for kind, count in kinds.items():
                log_metric(f"reward_server/failure/{kind}", count / len(outcomes))
            keys = {key for outcome in outcomes for key in outcome.details if key != "error"}
            for key in sorted(keys):
                values = [o.details[key] for o in outcomes if isinstance(o.details.get(key), float)]
                if values:
                    log_metric(f"reward_server/{key}", sum(values) / len(values))
        if log_extra is not None:
            log_extra("verify_status", [outcome.status for outcome in outcomes])
            log_extra("failure", [outcome.failure_kind or "" for outcome in outcomes])
        return [outcome.reward for outcome in outcomes]

    return nemo_gym_verify
