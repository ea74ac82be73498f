"""A judge that is down, slow, failing or answering garbage masks the sample (NeMo Gym's `judge_failed`), never
scores it 0; the server stays up; judge calls are bounded (concurrency, deadline, retries)."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from servers import FakeJudge, Reply, ServerThread

from common.net import free_port
from rewards.app import create_app
from rewards.config import load_config
from rewards.protocol import make_response


@pytest.fixture(scope="module")
def judge():
    fake = FakeJudge()
    with ServerThread(fake.app) as url:
        fake.url = url
        yield fake


@pytest.fixture
def fresh(judge):
    judge.reset()
    return judge


@pytest.fixture(scope="module")
def serve(judge):
    servers = {}

    def start(judge_url: str | None = "fake", **overrides) -> str:
        base = f"{judge.url}/v1" if judge_url == "fake" else judge_url
        settings = {"judge.base_url": base, "judge.timeout": 1.0, "judge.retries": 2, "judge.backoff_base": 0.01,
                    "judge.backoff_max": 0.05, "terminus_judge.enable_llm_judge": True, **overrides}
        key = json.dumps(settings, sort_keys=True)
        if key not in servers:
            thread = ServerThread(create_app(load_config(None, settings)))
            servers[key] = (thread, thread.start())
        return servers[key][1]

    yield start
    for thread, _ in servers.values():
        thread.stop()


def pivot_row() -> dict:
    """Keystrokes 12/14 similar (below 0.9): the judge decides."""
    gold = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls -la\n", "duration": 0.1}]}
    return {"responses_create_params": {"input": [{"role": "user", "content": "task"}]},
            "expected_answer": json.dumps(gold), "uuid": "u-7", "metadata": {"harness": "terminus_2"},
            "agent_ref": {"name": "terminus_judge_simple_agent"}}


PIVOT_ANSWER = make_response(json.dumps({"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls -al\n"}]}))


def mc_row(*questions) -> dict:
    return {"uuid": "m", "responses_create_params": {"input": [{"role": "user", "content": "hi"}]},
            "rubric": [{"question": q, "pass_criteria": "YES"} for q in questions], "context": "[USER]: hi",
            "agent_ref": {"name": "multichallenge_simple_agent"}}


def vf_row(*contents) -> dict:
    return {"id": 3, "responses_create_params": {"input": [{"role": "user", "content": "hi"}]},
            "llm_judge": [{"uid": i, "content": c, "source": "system", "is_misalignment_check": False}
                          for i, c in enumerate(contents)], "agent_ref": {"name": "verifif_simple_agent"}}


def post(url: str, row: dict, response: dict = PIVOT_ANSWER) -> dict:
    reply = httpx.post(f"{url}/verify", json=dict(row, response=response), timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def assert_masked(out: dict, *fragments: str) -> None:
    assert (out["reward"], out["mask_sample"], out["failure_kind"]) == (0.0, True, "judge_failed")
    assert out["_ng_failure_class"] == "judge_failed" and out["instance_config"]["mask_sample"] is True
    for fragment in fragments:
        assert fragment in out["failure_reason"], out["failure_reason"]


def assert_still_serving(url: str) -> None:
    assert httpx.get(f"{url}/health", timeout=5).json()["status"] == "ok"
    good = pivot_row()
    out = post(url, good, make_response(good["expected_answer"]))  # similarity 1.0: no judge needed
    assert (out["reward"], out["mask_sample"]) == (1.0, False)


def test_judge_down(serve):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    url = serve(dead)
    start = time.monotonic()
    out = post(url, pivot_row())
    assert_masked(out, f"{dead}/chat/completions", "ConnectError", "after 3 attempts")
    assert time.monotonic() - start < 5
    # NeMo Gym's judge_failsafe row: the request echoed, plus the failure fields
    assert (out["uuid"], out["agent_ref"], out["expected_answer"]) == ("u-7", {"name": "terminus_judge_simple_agent"},
                                                                       pivot_row()["expected_answer"])
    assert_still_serving(url)
    metrics = httpx.get(f"{url}/metrics").json()
    assert metrics["failures"]["judge_failed"] >= 1 and metrics["rewards"]["terminus_judge"]["masked"] >= 1
    assert metrics["judge"]["retries"] >= 2


def test_judge_slower_than_the_deadline(serve, fresh):
    fresh.default = Reply(text="[[A=B]]", delay=5)
    url = serve(**{"judge.timeout": 0.5})
    start = time.monotonic()
    out = post(url, pivot_row())
    elapsed = time.monotonic() - start
    assert_masked(out, fresh.url, "deadline")
    assert elapsed < 3  # one deadline, not retried
    assert_still_serving(url)


@pytest.mark.parametrize("status", [500, 503, 429])
def test_judge_http_errors_are_retried_then_masked(serve, fresh, status):
    fresh.default = Reply(status=status)
    url = serve()
    out = post(url, pivot_row())
    assert_masked(out, fresh.url, f"HTTP {status}", "after 3 attempts")
    assert len(fresh.requests) == 3  # the first try and 2 retries
    assert_still_serving(url)


def test_judge_client_errors_are_not_retried(serve, fresh):
    fresh.default = Reply(status=400)
    out = post(serve(), pivot_row())
    assert_masked(out, "HTTP 400")
    assert len(fresh.requests) == 1


def test_a_flaky_judge_recovers_within_the_retries(serve, fresh):
    fresh.default = lambda body, i: Reply(status=503) if i < 2 else "[[A=B]]"
    out = post(serve(), pivot_row())
    assert (out["reward"], out["mask_sample"], out["judge_passed"]) == (1.0, False, True)
    assert len(fresh.requests) == 3


def test_retry_after_is_honoured(serve, fresh):
    fresh.default = lambda body, i: Reply(status=429, headers={"Retry-After": "0.3"}) if i == 0 else "[[A=B]]"
    start = time.monotonic()
    out = post(serve(**{"judge.backoff_max": 1.0}), pivot_row())
    assert out["reward"] == 1.0 and time.monotonic() - start >= 0.3


@pytest.mark.parametrize("raw", [b"<html>bad gateway</html>", b'{"choices": []}', b'{"no": "choices"}',
                                 b'{"choices": [{"message": {"content": 7}}]}', b"\xff\xfe"])
def test_judge_garbage_body(serve, fresh, raw):
    fresh.default = Reply(raw=raw)
    url = serve()
    out = post(url, pivot_row())
    assert_masked(out, fresh.url, "not a chat completion")
    assert_still_serving(url)


def test_an_answer_without_a_verdict_is_not_a_failure(serve, fresh):
    fresh.default = "I would rather not say."
    out = post(serve(), pivot_row())
    assert (out["reward"], out["mask_sample"], out["failure_reason"]) == (0.0, False, "judge_parsing_failed")


def test_multichallenge_one_failed_item_masks_the_sample(serve, fresh):
    fresh.default = "[[YES]]"
    fresh.rules = [("broken", Reply(status=500))]
    url = serve()
    out = post(url, mc_row("fine 1", "broken", "fine 2"), make_response("answer"))
    assert_masked(out, "HTTP 500")
    assert out["rubric"][1]["question"] == "broken" and out["context"] == "[USER]: hi"  # the row, echoed
    assert "rubric_evaluations" not in out
    fresh.reset("[[YES]]")
    assert post(url, mc_row("fine"), make_response("answer"))["reward"] == 1.0


def test_verifif_judge_failure_masks_after_every_item_ran(serve, fresh):
    fresh.default = "[[YES]]"
    fresh.rules = [("down", Reply(status=503))]
    url = serve()
    out = post(url, vf_row("ok 1", "down", "ok 2"), make_response("answer"))
    assert_masked(out, "HTTP 503")
    assert len(fresh.requests) == 2 + 3  # both good items once, the failing one 3 times
    assert out["id"] == 3 and out["llm_judge"][1]["content"] == "down"


def test_no_judge_configured(serve):
    url = serve(None, **{"terminus_judge.enable_llm_judge": False})
    out = post(url, mc_row("q"), make_response("answer"))
    assert_masked(out, "no judge is configured", "--judge_base_url")
    assert_still_serving(url)


def test_concurrency_bound_is_observed_at_the_judge(serve, fresh):
    fresh.default = Reply(text="[[YES]]", delay=0.15)
    url = serve(**{"judge.max_concurrency": 3})

    async def burst():
        async with httpx.AsyncClient(timeout=30) as client:
            replies = await asyncio.gather(*[
                client.post(f"{url}/verify", json=dict(mc_row(f"q{i}a", f"q{i}b"), response=make_response("x")))
                for i in range(12)])
        return [r.json() for r in replies]

    outs = asyncio.run(burst())
    assert [o["reward"] for o in outs] == [1.0] * 12
    assert len(fresh.requests) == 24
    assert 2 <= fresh.max_in_flight <= 3  # in parallel, never above the limit
    assert httpx.get(f"{url}/metrics").json()["judge"]["max_concurrency"] == 3
