"""Server metrics for `GET /metrics`: request counts and latency by endpoint, rewards by environment, failures.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict, deque

from common.stats import percentile


class Metrics:
    """In-process counters. Latencies keep the last `window` requests per endpoint."""

    def __init__(self, window: int = 10_000):
        self.started = time.time()
        self.requests: Counter[str] = Counter()  # endpoint -> count
        self.status: Counter[str] = Counter()  # status code -> count
        self.latency: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))
        self.reward_sum: Counter[str] = Counter()
        self.reward_count: Counter[str] = Counter()
        self.masked: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()  # failure kind -> count (judge_failed, bad_request, ...)
        self.failure_reasons: dict[str, Counter[str]] = defaultdict(Counter)  # env -> failure_reason -> count

    def request(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests[endpoint] += 1
        self.status[str(status)] += 1
        self.latency[endpoint].append(seconds)
        if 400 <= status < 500:
            self.failures["bad_request" if status not in (401, 413) else
                          ("unauthorized" if status == 401 else "body_too_large")] += 1
        elif status >= 500:
            self.failures["internal_error"] += 1

    def verified(self, environment: str, result: dict) -> None:
        if result.get("mask_sample"):
            self.masked[environment] += 1
            self.failures[result.get("failure_kind") or "masked"] += 1
            if str(result.get("failure_reason") or "").startswith("verify_timeout:"):
                self.failures["verify_deadline"] += 1
        else:
            self.reward_sum[environment] += float(result.get("reward", 0.0))
            self.reward_count[environment] += 1
        reason = result.get("failure_reason")
        if reason not in (None, "none") and not result.get("mask_sample"):
            self.failure_reasons[environment][str(reason)] += 1

    def snapshot(self, judge=None) -> dict:
        latency = {}
        for endpoint, values in self.latency.items():
            ordered = sorted(values)
            latency[endpoint] = {"n": len(ordered), "p50_ms": 1e3 * percentile(ordered, 50),
                                 "p90_ms": 1e3 * percentile(ordered, 90), "p99_ms": 1e3 * percentile(ordered, 99),
                                 "max_ms": 1e3 * (ordered[-1] if ordered else 0.0)}
        environments = sorted(set(self.reward_count) | set(self.masked) | set(self.failure_reasons))
        rewards = {env: {"count": self.reward_count[env], "masked": self.masked[env],
                         "mean": (self.reward_sum[env] / self.reward_count[env]) if self.reward_count[env] else None,
                         "failure_reasons": dict(self.failure_reasons[env])} for env in environments}
        out = {"uptime_s": time.time() - self.started, "requests": dict(self.requests), "status": dict(self.status),
               "latency": latency, "rewards": rewards, "failures": dict(self.failures)}
        if judge is not None:
            out["judge"] = {"url": judge.url, "calls": judge.calls, "failures": judge.failures,
                            "retries": judge.retried, "in_flight": judge.in_flight,
                            "max_concurrency": judge.config.max_concurrency}
        return out
