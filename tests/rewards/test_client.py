"""The GRPO reward client against real sockets on loopback: a scripted flaky /verify server that drops
connections, answers 503, stalls past the timeout, masks samples or answers 4xx."""

import asyncio
import json

import pytest
from conftest import with_reasoning
from servers import FlakyServer

from common.model_families import FAMILIES
from rewards.client import (
    RewardClient,
    RewardClientConfig,
    RewardServerUnavailable,
    make_reward_function,
    policy_family,
)
from rewards.protocol import make_response

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


# ------------------------------------------------------- a reasoning model's completion (issue 21, e)

@pytest.fixture(scope="module")
def reward_server():
    from servers import ServerThread

    from rewards.app import create_app
    from rewards.config import load_config

    with ServerThread(create_app(load_config(None, {}))) as url:  # terminus_judge: string similarity, no judge
        yield url


ACTION = {"analysis": "The log is there.", "plan": "Count its lines.",
          "commands": [{"keystrokes": "wc -l < /app/input.log > /app/count.txt\n", "duration": 0.1}],
          "task_complete": False}
PIVOT = dict(ROW, expected_answer=json.dumps(ACTION))


def verified(url: str, completion, family) -> tuple[list, dict, dict]:
    """What the reward function sends for one TRL completion (its output items) and what the server answers."""
    sent = []

    class Recording(RewardClient):
        async def verify(self, row, text, reasoning=None):
            sent.append(make_response(text, reasoning=reasoning)["output"])
            return await super().verify(row, text, reasoning)

    reward = make_reward_function(Recording(RewardClientConfig(urls=[url], timeout=10)), family)
    log = {}
    [score] = asyncio.run(reward(prompts=[None], completions=[completion], row=[json.dumps(PIVOT)],
                                 log_extra=lambda key, values: log.setdefault(key, values)))
    return sent[0], {"reward": score, "failure": log["failure"][0]}, log


@pytest.mark.parametrize("key", FAMILIES)
@pytest.mark.parametrize("shape", ["conversational", "standard"])
def test_the_verify_body_carries_reasoning_apart_and_scores_the_same_action(key, shape, reward_server):
    family = FAMILIES[key]
    answer = json.dumps(ACTION, indent=2)
    text = with_reasoning(family, answer, "A thought with {braces} and </tool_call>.")
    completion = [{"role": "assistant", "content": text}] if shape == "conversational" else text
    output, outcome, _ = verified(reward_server, completion, family)
    _, bare, _ = verified(reward_server, [{"role": "assistant", "content": answer}], family)
    assert outcome == bare == {"reward": 1.0, "failure": ""}  # the same action as without reasoning
    message = [item for item in output if item["type"] == "message"]
    assert len(message) == 1 and json.loads(message[0]["content"][0]["text"]) == ACTION
    reasoning = [item for item in output if item["type"] == "reasoning"]
    if family.reasoning_format is None:
        assert reasoning == []
    else:  # before the message, one summary text, as NeMo Gym's converter writes it
        assert output[0]["type"] == "reasoning" and [s["type"] for s in reasoning[0]["summary"]] == ["summary_text"]
        assert reasoning[0]["summary"][0]["text"].strip() == "A thought with {braces} and </tool_call>."


@pytest.mark.parametrize("key", [k for k, f in FAMILIES.items() if f.reasoning_format == "think_tags"])
def test_a_block_opened_in_the_prompt_and_a_parsed_reasoning_field(key, reward_server):
    family = FAMILIES[key]
    answer = json.dumps(ACTION)
    text = with_reasoning(family, answer, "thinking", opened_in_prompt=True)
    output, outcome, _ = verified(reward_server, [{"role": "assistant", "content": text}], family)
    assert outcome["reward"] == 1.0 and output[0]["summary"][0]["text"].strip() == "thinking"
    assert json.loads(output[1]["content"][0]["text"]) == ACTION
    # a response schema's parse (TRL's parse_response) hands the reasoning as a field: it goes the same way
    parsed = [{"role": "assistant", "content": answer, "reasoning_content": "thinking"}]
    output, outcome, _ = verified(reward_server, parsed, family)
    assert outcome["reward"] == 1.0 and output[0]["summary"][0]["text"] == "thinking"
    # no family (one the table cannot tell): the text as it is; the server strips up to </think> itself
    output, outcome, _ = verified(reward_server, [{"role": "assistant", "content": text}], None)
    assert outcome["reward"] == 1.0 and [item["type"] for item in output] == ["message"]


def test_the_policys_family_or_none(tokenizer):
    assert policy_family(tokenizer).key == "qwen3"

    class Unknown:
        chat_template = "{{ messages }}"

    assert policy_family(Unknown) is None


@pytest.mark.parametrize("key", FAMILIES)
def test_the_server_on_a_completion_nobody_split(key, reward_server):
    """terminus_judge as NeMo Gym's: reasoning left in the message text is cut at the last `</think>`, so `<think>`
    families score their action; harmony text is not JSON (model_output_invalid), as in NeMo Gym, where gpt-oss's
    reasoning arrives split by vLLM's Responses API; here the client splits it (above)."""
    import httpx

    family = FAMILIES[key]
    for opened in (False, True):
        text = with_reasoning(family, json.dumps(ACTION), "thought {x}", opened_in_prompt=opened)
        out = httpx.post(f"{reward_server}/verify", json=dict(PIVOT, response=make_response(text)), timeout=30).json()
        if family.reasoning_format == "harmony_channels":
            assert (out["reward"], out["failure_reason"]) == (0.0, "model_output_invalid")
        else:
            assert (out["reward"], out["failure_reason"]) == (1.0, "none"), text
