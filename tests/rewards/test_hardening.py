"""Hardening of the reward server and its client against hostile or broken peers, on real loopback sockets:
non-finite rewards, CPU-heavy scoring, slow judges, half-sent requests."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from servers import FakeJudge, FlakyServer, Reply, ServerThread

from common.errors import ConfigError
from rewards.app import create_app
from rewards.client import RewardClient, RewardClientConfig, make_reward_function
from rewards.config import load_config
from rewards.protocol import make_response

ROW = {"responses_create_params": {"input": [{"role": "user", "content": "task"}]}, "expected_answer": "{}",
       "metadata": {"harness": "terminus_2"}, "agent_ref": {"name": "terminus_judge_simple_agent"}}


def client(*urls, **overrides):
    config = dict(urls=list(urls), timeout=5.0, retries=0, backoff=0.01, max_consecutive_failures=100)
    return RewardClient(RewardClientConfig(**{**config, **overrides}))


# ---- 9: a reward that is not a finite number is a failed sample, never a score ----------------------------------


@pytest.mark.parametrize("payload, kind", [
    (b'{"reward": 1e999}', "non_finite_reward"),
    (b'{"reward": -1e999}', "non_finite_reward"),
    (b'{"reward": Infinity}', "non_finite_reward"),
    (b'{"reward": NaN}', "non_finite_reward"),
    (b'{"reward": 1' + b"0" * 400 + b'}', "non_finite_reward"),
    ({"reward": "nan"}, "bad_reward_type"),
    ({"reward": "1.0"}, "bad_reward_type"),
    ({"reward": True}, "bad_reward_type"),
    ({"reward": None}, "bad_reward_type"),
    ({"reward": [1.0]}, "bad_reward_type"),
])
def test_non_finite_or_non_numeric_rewards_are_failed_samples(payload, kind):
    server = FlakyServer([payload])
    try:
        c = client(server.url)
        reward_fn = make_reward_function(c)
        metrics, extras = {}, {}
        rewards = asyncio.run(reward_fn(prompts=["p"], completions=["x"], row=[json.dumps(ROW)],
                                        log_metric=metrics.__setitem__, log_extra=extras.__setitem__))
    finally:
        server.stop()
    assert rewards == [None]
    assert extras["verify_status"] == ["failed"] and extras["failure"] == [kind]
    assert metrics[f"reward_server/failure/{kind}"] == 1.0 and c.counts[f"failed/{kind}"] == 1
    assert server.requests == 1  # a bad answer is not retried


def test_non_finite_detail_fields_are_left_out_and_good_rewards_still_count():
    server = FlakyServer([b'{"reward": 0.5, "similarity_score": NaN, "judge_score": 1e999, "big": 1' + b"0" * 400 + b', "n": 2}'])
    try:
        outcome = asyncio.run(client(server.url).verify(ROW, "x"))
    finally:
        server.stop()
    assert outcome.status == "ok" and outcome.reward == 0.5 and outcome.details == {"n": 2.0}


# ---- 6: scoring never holds the event loop; the compared lengths are capped --------------------------------------


def worst_case_action(n: int, gold: bool) -> dict:
    """difflib's slow case (cubic in n: ~7 s at 10,000 characters): the gold's keystrokes one repeated character,
    the prediction's holding it every 100th character (under difflib's 1% autojunk limit) among characters that
    never repeat."""
    keys = "x" * n if gold else "".join("x" if i % 100 == 50 else chr(0x4E00 + i) for i in range(n))
    return {"analysis": "a", "plan": "p", "commands": [{"keystrokes": keys, "duration": 0.1}]}


def big_row(n: int) -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "task"}]},
            "expected_answer": json.dumps(worst_case_action(n, gold=True)), "metadata": {"harness": "terminus_2"},
            "agent_ref": {"name": "terminus_judge_simple_agent"},
            "response": make_response(json.dumps(worst_case_action(n, gold=False)))}


def test_health_answers_while_big_similarities_are_scored():
    app = create_app(load_config(None, {}))
    rows = [big_row(10_000) for _ in range(8)]
    with ServerThread(app) as url:
        with ThreadPoolExecutor(len(rows)) as pool:
            started = threading.Event()

            def post(row):
                started.set()
                return httpx.post(f"{url}/verify", json=row, timeout=120)

            futures = [pool.submit(post, row) for row in rows]
            started.wait(10)
            health = httpx.get(f"{url}/health", timeout=10)  # generous bound: the unfixed server held it ~50 s
            in_flight = sum(not f.done() for f in futures)
            metrics = httpx.get(f"{url}/metrics", timeout=10)
            replies = [f.result() for f in futures]
    assert health.status_code == 200 and metrics.status_code == 200
    assert in_flight > 0  # /health answered while scoring was going on
    for reply in replies:
        assert reply.status_code == 200, reply.text
        out = reply.json()
        assert out["similarity_truncated"] is True and 0.0 <= out["similarity_score"] < 0.9
        assert out["reward"] == 0.0 and out["failure_reason"] == "string_similarity_below_threshold"


def test_similarity_cap_is_configurable_and_said_only_when_it_applies():
    short = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls -la\n", "duration": 0.1}]}
    long_gold = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ab" * 150_000, "duration": 0.1}]}
    long_pred = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ab" * 100 + "zz" * 150_000,
                                                             "duration": 0.1}]}

    def row(gold, pred):
        return {"responses_create_params": {"input": [{"role": "user", "content": "t"}]},
                "expected_answer": json.dumps(gold), "metadata": {"harness": "terminus_2"},
                "agent_ref": {"name": "terminus_judge"}, "response": make_response(json.dumps(pred))}

    with ServerThread(create_app(load_config(None, {"terminus_judge.max_similarity_chars": 200}))) as url:
        same = httpx.post(f"{url}/verify", json=row(short, short), timeout=60).json()
        cut = httpx.post(f"{url}/verify", json=row(long_gold, long_pred), timeout=60).json()
    assert same["reward"] == 1.0 and "similarity_truncated" not in same  # NeMo Gym's fields, unchanged
    # the first 200 characters of each side are the same: capped, the pair scores as equal, and says so
    assert cut["similarity_truncated"] is True and cut["similarity_score"] == 1.0 and cut["reward"] == 1.0
    with pytest.raises(ConfigError, match="max_similarity_chars"):
        load_config(None, {"terminus_judge.max_similarity_chars": 0})


# ---- 8: one deadline per verify, judge slot waits and retries included; the client derives its timeout ---------


def pivot_row(i: int = 0) -> dict:
    """Keystrokes below 0.9 similar: the judge decides."""
    gold = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls -la\n", "duration": 0.1}]}
    pred = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls -al\n", "duration": 0.1}]}
    return {"responses_create_params": {"input": [{"role": "user", "content": f"task {i}"}]},
            "expected_answer": json.dumps(gold), "uuid": f"u-{i}", "metadata": {"harness": "terminus_2"},
            "agent_ref": {"name": "terminus_judge_simple_agent"}, "response": make_response(json.dumps(pred))}


@pytest.fixture
def slow_judge():
    fake = FakeJudge(default=Reply(text="[[A=B]]", delay=3.0))
    with ServerThread(fake.app) as url:
        fake.url = url
        yield fake


def judged_server(judge_url: str, **overrides):
    settings = {"judge.base_url": f"{judge_url}/v1", "judge.timeout": 30.0, "judge.retries": 3,
                "judge.max_concurrency": 1, "terminus_judge.enable_llm_judge": True, **overrides}
    return ServerThread(create_app(load_config(None, settings)))


def test_verify_timeout_masks_slow_judges_and_covers_slot_waits(slow_judge):
    rows = [pivot_row(i) for i in range(6)]
    with judged_server(slow_judge.url, verify_timeout=0.5) as url:
        assert httpx.get(f"{url}/health", timeout=10).json()["verify_timeout"] == 0.5

        async def all_rows():
            async with httpx.AsyncClient(timeout=60) as http:  # generous: the unfixed server took 18 s
                return await asyncio.gather(*(http.post(f"{url}/verify", json=row) for row in rows))

        replies = asyncio.run(all_rows())
        metrics = httpx.get(f"{url}/metrics", timeout=10).json()
    for reply in replies:
        out = reply.json()
        assert (out["reward"], out["mask_sample"], out["failure_kind"]) == (0.0, True, "judge_failed"), out
        assert "verify_timeout" in out["failure_reason"] and out["_ng_failure_class"] == "judge_failed"
    # with one judge slot and a 0.5 s budget, most rows never got a slot: at most one call each, never retried
    assert len(slow_judge.requests) <= len(rows) and metrics["judge"]["retries"] == 0
    assert metrics["failures"]["verify_deadline"] == len(rows)


def test_verify_timeout_is_a_config_key_and_a_flag():
    from rewards.server import resolve

    config, _ = resolve(["--verify_timeout", "7.5"])
    assert config.verify_timeout == 7.5
    with pytest.raises(ConfigError, match="verify_timeout"):
        load_config(None, {"verify_timeout": 0})


def test_the_client_takes_the_servers_budget_and_gets_masked_samples(slow_judge):
    with judged_server(slow_judge.url, verify_timeout=1.0) as url:
        c = RewardClient(RewardClientConfig(urls=[url], retries=3, backoff=0.01))  # no timeout set
        row = {k: v for k, v in pivot_row().items() if k != "response"}

        async def go():
            return await c.verify(row, json.dumps({"analysis": "a", "plan": "p",
                                                   "commands": [{"keystrokes": "ls -al\n", "duration": 0.1}]}))

        outcome = asyncio.run(go())
    assert c.timeouts[url] == 1.0 + c.config.timeout_margin  # the server's verify_timeout plus the margin
    assert outcome.status == "masked" and outcome.failure_kind == "judge_failed"
    assert len(slow_judge.requests) == 1  # no client retry re-ran the judge
    assert c.counts["masked/judge_failed"] == 1 and c.consecutive_failures == 0


def test_a_timeout_the_user_sets_wins_and_a_server_without_a_budget_gets_the_fallback():
    server = FlakyServer(["ok"])  # answers /verify only: no /health budget to read
    try:
        c = client(server.url, timeout=None)
        assert asyncio.run(c.verify(ROW, "x")).status == "ok"
        assert c.timeouts[server.url] == c.config.fallback_timeout
        fixed = client(server.url, timeout=2.5)
        assert asyncio.run(fixed.verify(ROW, "x")).status == "ok" and fixed.timeouts[server.url] == 2.5
    finally:
        server.stop()


def test_a_set_timeout_shorter_than_the_servers_budget_is_warned_about_once(slow_judge, caplog):
    with judged_server(slow_judge.url, verify_timeout=100.0) as url:
        c = RewardClient(RewardClientConfig(urls=[url], timeout=5.0))
        with caplog.at_level("WARNING", logger="rewards.client"):
            assert asyncio.run(c.timeout_for(url)) == 5.0 and asyncio.run(c.timeout_for(url)) == 5.0
    warnings = [r.getMessage() for r in caplog.records if "shorter than the verify_timeout" in r.getMessage()]
    assert len(warnings) == 1 and url in warnings[0] and "100 s" in warnings[0]


# ---- 7: half-sent requests time out; connections are capped; floods are logged once ----------------------------


HALF_SENT = [b"POST /verify HTTP/1.1\r\nHost: x\r\n",  # headers never finished
             b"POST /verify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"a\"",
             b""]  # nothing at all


def closed_by_server(sock: socket.socket, bound: float = 20.0) -> bytes:
    """Read until the server closes the connection (b'' from recv); what it sent first. Raises socket.timeout when
    the server keeps it open past `bound` seconds (a generous upper bound, against hangs)."""
    sock.settimeout(bound)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def reward_server(**overrides):
    from rewards.server import uvicorn_options

    config = load_config(None, overrides)
    return ServerThread(create_app(config), **uvicorn_options(config))


def test_half_sent_requests_are_closed_after_the_read_timeout_and_health_answers():
    with reward_server(read_timeout=0.5, max_connections=500) as url:
        port = int(url.rsplit(":", 1)[1])
        socks = []
        for i in range(50):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(HALF_SENT[i % 3])
            socks.append(sock)
        try:
            assert httpx.get(f"{url}/health", timeout=10).status_code == 200
            for sock in socks:
                closed_by_server(sock)  # socket.timeout here: the server kept a half-sent request open
        finally:
            for sock in socks:
                sock.close()
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        good = pivot_row()
        good["response"] = make_response(good["expected_answer"])
        assert httpx.post(f"{url}/verify", json=good, timeout=30).json()["reward"] == 1.0
        metrics = httpx.get(f"{url}/metrics", timeout=10).json()
    assert metrics["connections"]["read_timeouts"] == 50


def test_connections_past_max_connections_get_503_and_the_flood_is_logged_once(caplog):
    with caplog.at_level("WARNING", logger="rewards"), reward_server(read_timeout=30, max_connections=20) as url:
        port = int(url.rsplit(":", 1)[1])
        socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(40)]
        try:
            # the server holds 20; each later one is answered 503 and closed at once (not kept until it times out)
            refused = [closed_by_server(sock) for sock in socks[25:]]
            assert all(reply.startswith(b"HTTP/1.1 503") for reply in refused), refused[:2]
            head, _, body = refused[0].partition(b"\r\n\r\n")  # a well-formed answer: length matches, JSON body
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            assert length == len(body) and "max_connections" in json.loads(body)["detail"]
        finally:
            for sock in socks:
                sock.close()
        deadline = 0
        while deadline < 200:  # the closed ones free their slots (generous bound, no timing assert)
            try:
                if httpx.get(f"{url}/health", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            deadline += 1
            time.sleep(0.05)
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        metrics = httpx.get(f"{url}/metrics", timeout=10).json()
    assert metrics["connections"]["refused"] >= 15
    floods = [r for r in caplog.records if "max_connections" in r.getMessage()]
    assert len(floods) == 1 and floods[0].exc_info is None  # once, one line, no traceback per connection


def test_out_of_descriptor_accept_errors_are_logged_once_not_a_traceback_each(caplog):
    from rewards.connections import ConnectionGuard

    guard = ConnectionGuard(read_timeout=1.0, max_connections=10)
    passed_on = []
    handle = guard.exception_handler(lambda loop, context: passed_on.append(context))
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level("WARNING", logger="rewards"):
            for _ in range(500):  # what asyncio reports per failed accept()
                handle(loop, {"message": "socket.accept() out of system resource",
                              "exception": OSError(24, "Too many open files")})
            handle(loop, {"message": "something else", "exception": RuntimeError("x")})
    finally:
        loop.close()
    lines = [r for r in caplog.records if "cannot accept connections" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None and guard.counts["accept_errors"] == 500
    assert [c["message"] for c in passed_on] == ["something else"]  # other errors go to the usual handler
