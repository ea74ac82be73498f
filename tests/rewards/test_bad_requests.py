"""Bad requests get a 4xx whose message names the field, never a 5xx, and the server keeps serving; bearer-token
auth; body-size limit; the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import ServerThread

from common.net import free_port, stop_process
from rewards import TOKEN_ENV
from rewards.app import create_app
from rewards.client import RewardArguments
from rewards.config import load_config
from rewards.protocol import make_response

REPO = Path(__file__).resolve().parents[2]

LIMIT = 256 * 1024


@pytest.fixture(scope="module")
def server():
    app = create_app(load_config(None, {"max_body_bytes": LIMIT}))
    with ServerThread(app) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            client.app = app
            yield client


@pytest.fixture(scope="module")
def pinned():
    with ServerThread(create_app(load_config(None, {"environment": "terminus_judge"}))) as url:
        yield url


GOLD = json.dumps({"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": 0.1}]})


def pivot_row() -> dict:
    return {"responses_create_params": {"input": [{"role": "user", "content": "task"}]}, "expected_answer": GOLD,
            "uuid": "u", "metadata": {"harness": "terminus_2"}, "threshold": 0.9,
            "agent_ref": {"type": "responses_api_agents", "name": "terminus_judge_simple_agent"},
            "response": make_response(GOLD)}


def mc_row() -> dict:
    return {"responses_create_params": {"input": "hi"}, "rubric": [{"question": "q", "pass_criteria": "YES"}],
            "context": "c", "agent_ref": {"name": "multichallenge_simple_agent"}, "response": make_response("x")}


def vf_row() -> dict:
    return {"responses_create_params": {"input": "hi"}, "llm_judge": [], "instructions": [],
            "agent_ref": {"name": "verifif_simple_agent"}, "response": make_response("x")}


def assert_serving(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200
    out = client.post("/verify", json=pivot_row())
    assert out.status_code == 200 and out.json()["reward"] == 1.0


def no_internal_errors(client: httpx.Client) -> None:
    assert client.get("/metrics").json()["failures"].get("internal_error", 0) == 0


@pytest.mark.parametrize("body,status,fragment", [
    (b"", 400, "empty"),
    (b"\x00\xff garbage \xfe", 400, "not valid JSON"),
    (b"{\"responses_create_params\": ", 400, "not valid JSON"),
    (b"[1, 2, 3]", 422, "must be a JSON object"),
    (b"\"a string\"", 422, "must be a JSON object"),
    (b"null", 422, "must be a JSON object"),
    (b"{\"threshold\": NaN}", 400, "NaN is not JSON"),
    (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
])
def test_unparseable_bodies(server, body, status, fragment):
    reply = server.post("/verify", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == status and fragment in reply.json()["detail"]
    assert_serving(server)


def mutate(row: dict, path: str, value) -> dict:
    node = row
    *parents, leaf = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is KeyError:
        del node[leaf]
    elif isinstance(node, list):
        node[int(leaf)] = value
    else:
        node[leaf] = value
    return row


@pytest.mark.parametrize("make,path,value,fragment", [
    (pivot_row, "responses_create_params", KeyError, "responses_create_params: Field required"),
    (pivot_row, "response", KeyError, "response: Field required"),
    (pivot_row, "response.output", KeyError, "response.output: Field required"),
    (pivot_row, "response.output", "text", "response.output: Input should be a valid list"),
    (pivot_row, "response.output.0", {"role": "assistant", "content": "x"}, "response.output.0.type: Field required"),
    (pivot_row, "response.output.0", {"type": "message", "content": "x"}, "needs a 'role'"),
    (pivot_row, "response.output.0.content", 42, "response.output.0.content"),
    (pivot_row, "response.output.0.content.0.text", ["x"], "response.output.0.content.0.text"),
    (pivot_row, "response.object", "chat.completion", "response.object"),
    (pivot_row, "responses_create_params.input", KeyError, "responses_create_params.input: Field required"),
    (pivot_row, "responses_create_params.bogus_key", 1, "responses_create_params.bogus_key: Extra inputs are not permitted"),
    (pivot_row, "responses_create_params.temperature", "hot", "responses_create_params.temperature"),
    (pivot_row, "responses_create_params.input", [1, 2], "responses_create_params.input"),
    (pivot_row, "expected_answer", {"analysis": "an object, not a string"}, "expected_answer: Input should be a valid string"),
    (pivot_row, "threshold", "high", "threshold: Input should be a valid number"),
    (pivot_row, "metadata", ["terminus_2"], "metadata: Input should be a valid dictionary"),
    (pivot_row, "uuid", {"a": 1}, "uuid"),
    (pivot_row, "agent_ref", "terminus_judge", "agent_ref: must be an object with a string 'name'"),
    (pivot_row, "agent_ref.name", 5, "agent_ref: must be an object with a string 'name'"),
    (mc_row, "rubric", "be nice", "rubric: Input should be a valid list"),
    (mc_row, "rubric.0.pass_criteria", 1, "rubric.0.pass_criteria: Input should be a valid string"),
    (mc_row, "rubric.0.weight", "heavy", "rubric.0.weight"),
    (mc_row, "rubric.0", "just a question", "rubric.0"),
    (mc_row, "context", 12, "context: Input should be a valid string"),
    (mc_row, "task_id", "seven", "task_id"),
    (vf_row, "llm_judge", [{"uid": 1, "content": "c", "is_misalignment_check": False}], "llm_judge.0.source: Field required"),
    (vf_row, "llm_judge", [{"uid": 1, "content": "c", "source": "admin", "is_misalignment_check": False}], "llm_judge.0.source"),
    (vf_row, "llm_judge", [{"uid": 1, "content": "c", "source": "user", "is_misalignment_check": "maybe"}],
     "llm_judge.0.is_misalignment_check"),
    (vf_row, "llm_judge", [{"uid": 1, "content": "c", "source": "user", "is_misalignment_check": True,
                            "pass_criteria": "PERHAPS"}], "llm_judge.0.pass_criteria"),
    (vf_row, "instructions", [1, 2], "instructions.0: Input should be a valid dictionary"),
    (vf_row, "id", "x1", "id: Input should be a valid integer"),
])
def test_wrong_fields_are_422_naming_the_field(server, make, path, value, fragment):
    reply = server.post("/verify", json=mutate(make(), path, value))
    assert reply.status_code == 422, reply.text
    assert fragment in reply.json()["detail"], reply.json()["detail"]


def test_fallback_fields_are_checked_when_used(server):
    row = mc_row()
    row.update(rubric=None, context=None, metadata={"rubric": [{"question": 3}], "messages": "not a list"})
    reply = server.post("/verify", json=row)
    assert reply.status_code == 422 and "metadata.messages: must be a list of objects" in reply.json()["detail"]
    row["metadata"]["messages"] = [{"role": "user", "content": "hi"}]
    reply = server.post("/verify", json=row)
    assert reply.status_code == 422 and "metadata.rubric: question" in reply.json()["detail"]


def test_routing_errors(server, pinned):
    row = pivot_row()
    del row["agent_ref"]
    reply = server.post("/verify", json=row)
    assert reply.status_code == 400
    detail = reply.json()["detail"]
    assert "no agent_ref.name" in detail and "terminus_judge_string_only_simple_agent" in detail and \
        "turing_vif_simple_agent" in detail
    reply = server.post("/verify", json=dict(pivot_row(), agent_ref={"name": "math_with_judge_simple_agent"}))
    assert reply.status_code == 400 and "'math_with_judge_simple_agent' is not served here" in reply.json()["detail"]
    # a server pinned to one environment takes rows without agent_ref, and refuses another environment's rows
    assert httpx.post(f"{pinned}/verify", json=row).json()["reward"] == 1.0
    assert httpx.post(f"{pinned}/verify", json=dict(row, agent_ref={"name": "my_custom_agent"})).status_code == 200
    reply = httpx.post(f"{pinned}/verify", json=mc_row())
    assert reply.status_code == 400 and "is a multichallenge row" in reply.json()["detail"]


def test_hostile_strings_and_numbers_are_scored(server):
    # a lone surrogate (valid JSON escape, invalid Unicode) and NaN inside the model's own text
    text = '{"analysis": "\\ud800", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": NaN}]}'
    row = pivot_row()
    row["response"] = make_response(text)
    reply = server.post("/verify", json=row)
    assert reply.status_code == 200
    out = reply.json()
    assert out["reward"] == 1.0 and out["parsed_output"]["commands"][0]["duration"] is None
    # NeMo Gym's _sanitize_unicode_string: encode(surrogatepass).decode(replace), one U+FFFD per byte (3)
    assert out["parsed_output"]["analysis"] == "\ufffd" * 3
    raw = json.dumps(pivot_row()).replace('"u"', '"\\udc00 lone"').encode()
    reply = server.post("/verify", content=raw)
    assert reply.status_code == 200 and reply.json()["uuid"] == "\ufffd" * 3 + " lone"
    deep = pivot_row()
    deep["metadata"]["nested"] = json.loads("[" * 900 + "]" * 900)
    assert server.post("/verify", json=deep).status_code < 500
    deep_text = pivot_row()
    deep_text["response"] = make_response("[" * 50_000 + "]" * 50_000)
    assert server.post("/verify", json=deep_text).json()["failure_reason"] == "model_output_invalid"
    no_internal_errors(server)


def test_huge_bodies(server):
    row = pivot_row()
    row["responses_create_params"]["input"][0]["content"] = "x" * (LIMIT + 1)
    reply = server.post("/verify", json=row)
    assert reply.status_code == 413 and str(LIMIT) in reply.json()["detail"]

    def chunks():  # no Content-Length: counted while streaming
        for _ in range(LIMIT // 4096 + 2):
            yield b"x" * 4096

    reply = server.post("/verify", content=chunks())
    assert reply.status_code == 413
    row["responses_create_params"]["input"][0]["content"] = "x" * (LIMIT - 4096)
    assert server.post("/verify", json=row).status_code == 200  # just under the limit
    assert_serving(server)


def test_other_endpoints(server):
    assert server.post("/seed_session", json={}).json() == {}
    assert server.post("/seed_session", json=pivot_row()).json() == {}  # legacy: the whole row
    assert server.post("/seed_session", json={"resources_session_id": "s1", "episode_id": "e"}).json() == \
        {"resources_session_id": "s1"}
    assert server.post("/close_session", json={"resources_session_id": "s1", "episode_id": "e"}).json() == {}
    assert server.post("/seed_session", content=b"garbage").status_code == 400
    assert server.get("/verify").status_code == 405
    assert server.get("/nope").status_code == 404
    health = server.get("/health").json()
    assert health == {"status": "ok", "judge": False, "verify_timeout": 180.0,  # the GRPO client's timeout budget
                      "environments": ["terminus_judge", "terminus_functional", "multichallenge", "verifif"]}
    metrics = server.get("/metrics").json()
    assert {"requests", "latency", "rewards", "failures", "status"} <= set(metrics)
    assert metrics["latency"]["/verify"]["p50_ms"] > 0 and metrics["rewards"]["terminus_judge"]["mean"] is not None


def test_internal_errors_are_500_short_logged_and_counted():
    app = create_app(load_config(None))

    async def broken(request, raw):
        raise RuntimeError("a bug")

    app.state.environments["terminus_judge"].verify = broken
    with ServerThread(app) as url:
        reply = httpx.post(f"{url}/verify", json=pivot_row())
        assert reply.status_code == 500 and reply.json() == {"detail": "internal error: RuntimeError (logged by the server)"}
        assert httpx.get(f"{url}/metrics").json()["failures"]["internal_error"] == 1
        assert httpx.get(f"{url}/health").status_code == 200


# ---- property-based: nothing a client sends gets a 5xx --------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**20) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12)
ROW_PATHS = ["responses_create_params", "responses_create_params.input", "responses_create_params.input.0",
             "responses_create_params.tools", "response", "response.output", "response.output.0",
             "response.output.0.content", "response.output.0.content.0", "response.output.0.content.0.text",
             "response.output.0.role", "response.output.0.type", "expected_answer", "metadata", "metadata.harness",
             "threshold", "uuid", "agent_ref", "agent_ref.name", "rubric", "context", "llm_judge", "instructions"]
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])


@PROPERTY
@given(body=json_values)
def test_any_json_body_is_never_a_5xx(server, body):
    assert server.post("/verify", json=body).status_code < 500


@PROPERTY
@given(make=st.sampled_from([pivot_row, mc_row, vf_row]), path=st.sampled_from(ROW_PATHS),
       value=json_values | st.just(KeyError))
def test_any_mutated_row_is_never_a_5xx(server, make, path, value):
    row = make()
    try:
        row = mutate(row, path, value)
    except (KeyError, IndexError, TypeError, ValueError):
        row[path.split(".")[0]] = None if value is KeyError else value
    reply = server.post("/verify", json=row)
    assert reply.status_code < 500, reply.text
    if reply.status_code >= 400:
        assert reply.json()["detail"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=200))
def test_any_bytes_are_never_a_5xx(server, raw):
    assert server.post("/verify", content=raw).status_code < 500


def test_still_serving_after_the_fuzzing(server):
    assert_serving(server)
    no_internal_errors(server)


# ---- auth ------------------------------------------------------------------------------------------------------


def test_bearer_token():
    with ServerThread(create_app(load_config(None, {"auth_token": "s3cret"}))) as url:
        assert httpx.get(f"{url}/health").status_code == 200  # open
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret"},
                        {"Authorization": "s3cret"}):
            reply = httpx.post(f"{url}/verify", json=pivot_row(), headers=headers)
            assert reply.status_code == 401 and "bearer token" in reply.json()["detail"]
            assert httpx.get(f"{url}/metrics", headers=headers).status_code == 401
        ok = {"Authorization": "Bearer s3cret"}
        assert httpx.post(f"{url}/verify", json=pivot_row(), headers=ok).json()["reward"] == 1.0
        assert httpx.get(f"{url}/metrics", headers=ok).json()["failures"]["unauthorized"] == 8


# ---- the command line ------------------------------------------------------------------------------------------


def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "rewards.server", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


def test_cli_help_and_bad_arguments():
    out = cli("--help")
    assert out.returncode == 0 and "--judge_base_url" in out.stdout and "agent_ref.name" in out.stdout
    for args, fragment in [(("--port", "abc"), "--port: invalid int value"),
                           (("--config", "configs/rewards/none.yaml"), "no such file"),
                           (("--environment", "verifif"), "needs an LLM judge"),
                           (("--config", "configs/rewards/terminus_judge_llm.yaml"), "needs an LLM judge"),
                           (("--judge_max_concurrency", "0"), "judge.max_concurrency"),
                           (("--bogus",), "unrecognized arguments")]:
        out = cli(*args)
        assert out.returncode == 2 and fragment in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_cli_serves(tmp_path):
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "rewards.server", "--config", "configs/rewards/all.yaml",
                                "--port", str(port), "--auth_token", "t"], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
        reply = httpx.post(f"http://127.0.0.1:{port}/verify", json=pivot_row(), headers={"Authorization": "Bearer t"})
        assert reply.json()["reward"] == 1.0
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_a_server_other_machines_can_reach_needs_a_token(monkeypatch):
    """One rule for the repository's servers (episodes.server too): off loopback, a bearer token or no server."""
    env = {key: value for key, value in os.environ.items() if key != TOKEN_ENV}
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "rewards.server", "--host", "0.0.0.0", "--port", str(port)],
                               cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            try:
                served = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                served = False
            assert not served, "the reward server serves on 0.0.0.0 without a token"
            time.sleep(0.2)
        _, stderr = process.communicate(timeout=30)
    finally:
        stop_process(process)
    assert process.returncode == 2 and stderr.strip() == (
        "error: --host 0.0.0.0 can be reached from other machines, and this server scores what it is sent and "
        f"calls its judge: give it a bearer token (--auth_token T, or ${TOKEN_ENV}) and its clients the same, or "
        "bind to 127.0.0.1")
    # its clients read the same variable, as the episode server's do (launch/slurm/grpo.sbatch sets it for both)
    monkeypatch.setenv(TOKEN_ENV, "t0k")
    assert RewardArguments().client_config(["http://r:8100"]).auth_token == "t0k"
    assert RewardArguments(reward_auth_token="mine").client_config(["http://r:8100"]).auth_token == "mine"

