"""The GRPO reward client against real sockets on loopback: a scripted flaky /verify server that drops
connections, answers 503, stalls past the timeout, masks samples or answers 4xx."""

import asyncio
import json

import pytest
from servers import FlakyServer

from rewards.client import RewardClient, RewardClientConfig, RewardServerUnavailable, make_reward_function

ROW = {"responses_create_params": {"input": [{"role": "user", "content": "task"}]}, "expected_answer": "{}",
       "metadata": {"harness": "terminus_2"}, "agent_ref": {"type": "responses_api_agents",
                                                             "name": "terminus_judge_simple_agent"}}


@pytest.fixture
def serve():
    servers = []

    def start(script, reward=1.0):
        servers.append(FlakyServer(script, reward))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()


def client(*urls, **overrides):
    config = dict(urls=list(urls), timeout=0.5, retries=3, backoff=0.01, max_consecutive_failures=100)
    return RewardClient(RewardClientConfig(**{**config, **overrides}))


def test_retries_through_drops_503s_and_stalls(serve):
    server = serve(["drop", "503", "stall", "ok"])
    outcome = asyncio.run(client(server.url).verify(ROW, '{"analysis": "a"}'))
    assert outcome.reward == 1.0 and outcome.status == "ok" and server.requests == 4
    sent = server.bodies[-1]
    assert sent["expected_answer"] == "{}" and sent["agent_ref"] == ROW["agent_ref"]
    message = [item for item in sent["response"]["output"] if item["type"] == "message"][0]
    assert message["role"] == "assistant" and message["content"][0]["text"] == '{"analysis": "a"}'


def test_exhausted_retries_exclude_the_sample_and_count_it(serve):
    server = serve(["503"])
    c = client(server.url, retries=2)
    outcome = asyncio.run(c.verify(ROW, "x"))
    assert outcome.reward is None and outcome.status == "failed" and outcome.failure_kind == "unreachable"
    assert server.requests == 3 and c.counts["failed/unreachable"] == 1
    assert "HTTP 503" in outcome.details["error"] and server.url in outcome.details["error"]


def test_masked_sample_is_excluded_not_zero(serve):
    server = serve(["masked"])
    c = client(server.url)
    outcome = asyncio.run(c.verify(ROW, "x"))
    assert outcome.reward is None and outcome.status == "masked" and outcome.failure_kind == "judge_failed"
    assert c.counts["masked/judge_failed"] == 1 and c.consecutive_failures == 0 and server.requests == 1


def test_4xx_is_not_retried(serve):
    server = serve(["422"])
    outcome = asyncio.run(client(server.url).verify(ROW, "x"))
    assert outcome.status == "failed" and outcome.failure_kind == "bad_request" and server.requests == 1
    assert "HTTP 422" in outcome.details["error"] and "field required" in outcome.details["error"]


def test_stops_after_consecutive_failures_naming_the_url(serve):
    server = serve(["ok", "503"])
    c = client(server.url, retries=0, max_consecutive_failures=3)

    async def scenario():
        assert (await c.verify(ROW, "x")).reward == 1.0
        assert (await c.verify(ROW, "x")).status == "failed"
        assert (await c.verify(ROW, "x")).status == "failed"
        await c.verify(ROW, "x")

    with pytest.raises(RewardServerUnavailable, match=f"failed 3 times in a row .*{server.url}"):
        asyncio.run(scenario())


def test_requests_spread_over_urls_and_retries_move_on(serve):
    a, b = serve(["ok"], reward=1.0), serve(["ok"], reward=0.0)
    c = client(a.url, b.url)

    async def many():
        return await asyncio.gather(*(c.verify(ROW, "x") for _ in range(10)))

    rewards = [o.reward for o in asyncio.run(many())]
    assert a.requests == 5 and b.requests == 5 and sorted(rewards) == [0.0] * 5 + [1.0] * 5
    dead, alive = serve(["drop"]), serve(["ok"])
    outcome = asyncio.run(client(dead.url, alive.url).verify(ROW, "x"))
    assert outcome.reward == 1.0 and dead.requests == 1 and alive.requests == 1


def test_reward_function_as_trl_calls_it(serve):
    server = serve(None)
    reward_fn = make_reward_function(client(server.url, retries=0))
    metrics, extras = {}, {}
    rows = [json.dumps(ROW)] * 3
    completions = [[{"role": "assistant", "content": "ok"}], [{"role": "assistant", "content": "masked"}], "503"]
    rewards = asyncio.run(reward_fn(prompts=["p"] * 3, completions=completions, row=rows,
                                    log_metric=metrics.__setitem__, log_extra=extras.__setitem__))
    assert rewards[0] == 1.0 and rewards[1:] == [None, None]
    assert metrics["reward_server/ok_fraction"] == pytest.approx(1 / 3)
    assert metrics["reward_server/masked_fraction"] == pytest.approx(1 / 3)
    assert metrics["reward_server/failed_fraction"] == pytest.approx(1 / 3)
    assert metrics["reward_server/failure/judge_failed"] == pytest.approx(1 / 3)
    assert metrics["reward_server/similarity_score"] == 0.5
    assert extras["verify_status"] == ["ok", "masked", "failed"]
