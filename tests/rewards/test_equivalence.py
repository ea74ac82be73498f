"""Rewards equal NeMo Gym's: `resources_servers/terminus_judge`, `multichallenge` and `verifif` in
https://github.com/NVIDIA-NeMo/Gym, and its example rows (vendored in tests/fixtures/nemo_gym/).

Every expected value here is worked out by hand from NeMo Gym's scoring rules (similarity ratios as 2*M/T with M
the matched characters), never by calling the server's own functions. Real servers on loopback: the reward app under
uvicorn in a thread, and a scripted OpenAI-compatible fake judge.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from servers import FakeJudge, Reply, ServerThread

from rewards.app import create_app
from rewards.config import load_config
from rewards.protocol import make_response

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "nemo_gym"  # NeMo Gym's rows; see its README.md


# ---- loopback servers -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def judge():
    fake = FakeJudge()
    with ServerThread(fake.app) as url:
        fake.url = url
        yield fake


@pytest.fixture(scope="module")
def serve(judge):
    """serve(overrides) -> URL of a reward server with that config (one server per distinct config)."""
    servers: dict[str, tuple[ServerThread, str]] = {}

    def start(overrides: dict | None = None) -> str:
        key = json.dumps(overrides or {}, sort_keys=True)
        if key not in servers:
            config = load_config(None, {"judge.base_url": f"{judge.url}/v1", "judge.model": "fake-judge",
                                        "judge.retries": 0, "judge.timeout": 10, **(overrides or {})})
            thread = ServerThread(create_app(config))
            servers[key] = (thread, thread.start())
        return servers[key][1]

    yield start
    for thread, _ in servers.values():
        thread.stop()


@pytest.fixture
def fresh(judge):
    judge.reset()
    return judge


def verify(url: str, row: dict, response: dict | None = None) -> dict:
    body = dict(row) if response is None else dict(row, response=response)
    reply = httpx.post(f"{url}/verify", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def response_of(*texts: str, reasoning: str | None = None) -> dict:
    """A Responses object with one assistant message per text (after an optional reasoning item)."""
    output = [] if reasoning is None else [{"type": "reasoning", "id": "rs_1",
                                            "summary": [{"type": "summary_text", "text": reasoning}]}]
    output += [{"type": "message", "id": f"msg_{i}", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": t, "annotations": []}]} for i, t in enumerate(texts)]
    return {"id": "resp_1", "object": "response", "created_at": 1.0, "model": "policy", "output": output,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}


# ---- terminus_judge -------------------------------------------------------------------------------------------


def t2(*keystrokes: str, task_complete=None, **extra) -> dict:
    action = {"analysis": "look", "plan": "list", "commands": [{"keystrokes": k, "duration": 0.1} for k in keystrokes]}
    if task_complete is not None:
        action["task_complete"] = task_complete
    return {**action, **extra}


def t1(*keystrokes: str, done=False, **extra) -> dict:
    return {"state_analysis": "s", "explanation": "e",
            "commands": [{"keystrokes": k, "is_blocking": True, "timeout_sec": 5} for k in keystrokes],
            "is_task_complete": done, **extra}


def pivot_row(expected, harness="terminus_2", threshold=None, **extra) -> dict:
    row = {"responses_create_params": {"input": [{"role": "user", "content": "Solve the task. Answer in JSON."}]},
           "expected_answer": expected if isinstance(expected, str) or expected is None else json.dumps(expected),
           "uuid": "u-1", "metadata": {"harness": harness} if harness else {},
           "agent_ref": {"type": "responses_api_agents", "name": "terminus_judge_string_only_simple_agent"}}
    if threshold is not None:
        row["threshold"] = threshold
    return {**row, **extra}


def checks(out: dict) -> tuple:
    return (out["reward"], out["failure_reason"], out["schema_check_passed"], out["task_complete_check_passed"],
            out["string_similarity_passed"], out["judge_passed"])


STRING_ONLY = None  # the default server: string similarity >= 0.9, no judge


def test_expected_answer_missing_or_empty(serve):
    url = serve(STRING_ONLY)
    for expected in (None, ""):
        out = verify(url, pivot_row(expected), response_of(json.dumps(t2("ls\n"))))
        assert checks(out) == (0.0, "expected_answer_invalid", None, None, None, None)
        assert out["expected_answer"] == "" and out["model_output"] == "" and out["parsed_output"] is None


def test_expected_answer_falls_back_to_metadata(serve):
    row = pivot_row(None)
    row["metadata"]["expected_answer"] = json.dumps(t2("ls\n"))
    out = verify(serve(STRING_ONLY), row, response_of(json.dumps(t2("ls\n"))))
    assert checks(out) == (1.0, "none", True, True, True, None)
    assert out["expected_answer"] == json.dumps(t2("ls\n"))


def test_expected_answer_not_json_or_not_object(serve):
    url = serve(STRING_ONLY)
    for expected in ("{not json", "[1, 2]", "3"):
        out = verify(url, pivot_row(expected), response_of(json.dumps(t2("ls\n"))))
        assert checks(out) == (0.0, "expected_answer_invalid", None, None, None, None)
        assert out["model_output"] == json.dumps(t2("ls\n"))  # the text is reported from step 4 on


def test_expected_answer_failing_its_schema(serve):
    bad_gold = {"analysis": "a", "commands": []}  # terminus_2 without `plan`
    out = verify(serve(STRING_ONLY), pivot_row(bad_gold), response_of(json.dumps(t2("ls\n"))))
    assert checks(out) == (0.0, "expected_answer_invalid", None, None, None, None)
    assert out["parsed_output"] == t2("ls\n")


def test_empty_model_output(serve):
    url = serve(STRING_ONLY)
    for response in (response_of("  \n ", reasoning=json.dumps(t2("ls\n"))), response_of(reasoning="thinking")):
        out = verify(url, pivot_row(t2("ls\n")), response)
        assert checks(out) == (0.0, "model_output_invalid", None, None, None, None)
        assert out["model_output"] == ""


@pytest.mark.parametrize("text", [
    "Here is my action: " + json.dumps(t2("ls\n")),  # prose before the JSON
    "```json\n" + json.dumps(t2("ls\n")) + "\n```",  # a fenced block: no extraction
    json.dumps(t2("ls\n")) + " trailing words",
    "[1, 2]", "42", '"a string"', "true", "{'single': 'quotes'}",
])
def test_model_output_must_be_exactly_one_json_object(serve, fresh, text):
    out = verify(serve({"terminus_judge.enable_llm_judge": True}), pivot_row(t2("ls\n")), response_of(text))
    assert checks(out) == (0.0, "model_output_invalid", None, None, None, None)
    assert out["parsed_output"] is None and out["model_output"] == text.strip()
    assert fresh.requests == []  # the judge is never called on malformed output


def test_think_stripping_keeps_what_follows_the_last_close_tag(serve):
    action = json.dumps(t2("ls\n"))
    url = serve(STRING_ONLY)
    out = verify(url, pivot_row(t2("ls\n")), response_of(f"<think>maybe {{not json}}</think>\n  {action}  "))
    assert checks(out) == (1.0, "none", True, True, True, None) and out["model_output"] == action
    out = verify(url, pivot_row(t2("ls\n")), response_of(f"a</think>b</think>{action}"))
    assert out["reward"] == 1.0
    out = verify(url, pivot_row(t2("ls\n")), response_of(f"<think>x</think>{action}</think>"))  # nothing after it
    assert checks(out)[:2] == (0.0, "model_output_invalid") and out["model_output"] == ""


def test_all_assistant_messages_are_concatenated_with_newlines(serve):
    action = json.dumps(t2("ls\n"), indent=2)
    head, tail = action[:action.index('"plan"')], action[action.index('"plan"'):]
    out = verify(serve(STRING_ONLY), pivot_row(t2("ls\n")), response_of(head, tail, reasoning="ignored"))
    assert out["reward"] == 1.0 and out["model_output"] == (head + "\n" + tail).strip()
    # two complete actions in two messages are not one JSON object
    out = verify(serve(STRING_ONLY), pivot_row(t2("ls\n")), response_of(json.dumps(t2("ls\n")), json.dumps(t2("ls\n"))))
    assert out["failure_reason"] == "model_output_invalid"
    # several text parts of one message are joined with newlines too
    parts = response_of("x")
    parts["output"][0]["content"] = [{"type": "output_text", "text": head, "annotations": []},
                                     {"type": "output_text", "text": tail, "annotations": []}]
    assert verify(serve(STRING_ONLY), pivot_row(t2("ls\n")), parts)["reward"] == 1.0


@pytest.mark.parametrize("metadata", [{}, {"harness": "terminus_3"}, {"harness": None}, {"harness": ["terminus_2"]}])
def test_unknown_harness(serve, metadata):
    row = pivot_row(t2("ls\n"))
    row["metadata"] = metadata
    out = verify(serve(STRING_ONLY), row, response_of(json.dumps(t2("ls\n"))))
    assert checks(out) == (0.0, "unknown_harness", None, None, None, None)
    assert out["parsed_output"] == t2("ls\n")
    row.pop("metadata")
    assert verify(serve(STRING_ONLY), row, response_of(json.dumps(t2("ls\n"))))["failure_reason"] == "unknown_harness"


@pytest.mark.parametrize("prediction", [
    t2("ls\n", extra_key=1),  # extra top-level key
    {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": 0.1, "is_blocking": True}]},
    {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": "1"}]},  # duration not a number
    {"analysis": "a", "commands": [{"keystrokes": "ls\n"}]},  # plan missing
    {"analysis": "a", "plan": "p", "commands": [{"duration": 1}]},  # keystrokes missing
    {"analysis": "a", "plan": "p", "commands": "ls"},
    t2("ls\n", task_complete="yes"),
    t1("ls\n"),  # the other harness's keys
])
def test_terminus_2_schema(serve, prediction):
    out = verify(serve(STRING_ONLY), pivot_row(t2("ls\n")), response_of(json.dumps(prediction)))
    assert checks(out) == (0.0, "schema_check_failed", False, None, None, None)
    assert out["parsed_output"] == prediction


def test_terminus_2_minimal_valid_action(serve):
    prediction = {"analysis": "", "plan": "", "commands": [{"keystrokes": "ls\n"}]}  # duration, task_complete optional
    out = verify(serve(STRING_ONLY), pivot_row(t2("ls\n")), response_of(json.dumps(prediction)))
    assert checks(out) == (1.0, "none", True, True, True, None)


@pytest.mark.parametrize("prediction,ok", [
    (t1("pip list | grep oauth\n"), True),
    ({**t1("pip list | grep oauth\n"), "commands": [{"keystrokes": "pip list | grep oauth\n", "timeout_sec": 5}]}, False),
    ({k: v for k, v in t1("pip list | grep oauth\n").items() if k != "is_task_complete"}, False),  # required in t1
    (t1("pip list | grep oauth\n", task_complete=False), False),  # a terminus_2 key
    ({**t1("pip list | grep oauth\n"), "commands": [{"keystrokes": "x", "is_blocking": "yes", "timeout_sec": 5}]}, False),
])
def test_terminus_1_schema(serve, prediction, ok):
    row = pivot_row(t1("pip list | grep oauth\n"), harness="terminus_1")
    out = verify(serve(STRING_ONLY), row, response_of(json.dumps(prediction)))
    expected = (1.0, "none", True, True, True, None) if ok else (0.0, "schema_check_failed", False, None, None, None)
    assert checks(out) == expected


@pytest.mark.parametrize("gold,prediction,passes", [
    (t2("ls\n", task_complete=True), t2("ls\n"), False),  # gold complete, flag missing
    (t2("ls\n", task_complete=True), t2("ls\n", task_complete=False), False),
    (t2("ls\n", task_complete=True), t2("ls\n", task_complete=True), True),
    (t2("ls\n", task_complete=False), t2("ls\n", task_complete=True), True),  # one-way: a spurious true passes
    (t2("ls\n"), t2("ls\n", task_complete=True), True),
])
def test_task_complete_is_one_way(serve, gold, prediction, passes):
    out = verify(serve(STRING_ONLY), pivot_row(gold), response_of(json.dumps(prediction)))
    assert checks(out) == ((1.0, "none", True, True, True, None) if passes
                           else (0.0, "task_complete_check_failed", True, False, None, None))


def test_task_complete_terminus_1(serve):
    row = pivot_row(t1("ls\n", done=True), harness="terminus_1")
    out = verify(serve(STRING_ONLY), row, response_of(json.dumps(t1("ls\n", done=False))))
    assert checks(out) == (0.0, "task_complete_check_failed", True, False, None, None)
    row = pivot_row(t1("ls\n", done=False), harness="terminus_1")
    assert verify(serve(STRING_ONLY), row, response_of(json.dumps(t1("ls\n", done=True))))["reward"] == 1.0


# SequenceMatcher ratio = 2*M/T (T = both lengths together), M worked out by hand:
#   "ls -la\n" vs "ls -al\n": M = 6 ("ls -" + "a" + "\n"... the longest blocks "ls -", "l"/"a", "\n"), T = 14 -> 12/14
#   "python reproduce_issue.py\n" (26) vs "python3 reproduce_issue.py\n" (27): M = 26, T = 53 -> 52/53
#   "ls -la\n" (7) vs "ls -la /testbed\n" (16): M = 7, T = 23 -> 14/23
@pytest.mark.parametrize("gold,pred,ratio", [
    ("ls -la\n", "ls -al\n", 12 / 14),
    ("python reproduce_issue.py\n", "python3 reproduce_issue.py\n", 52 / 53),
    ("ls -la\n", "ls -la /testbed\n", 14 / 23),
])
def test_similarity_examples(serve, gold, pred, ratio):
    out = verify(serve(STRING_ONLY), pivot_row(t2(gold)), response_of(json.dumps(t2(pred))))
    assert out["similarity_score"] == pytest.approx(ratio, abs=1e-12)
    assert round(out["similarity_score"], 3) in (0.857, 0.981, 0.609)
    passed = ratio >= 0.9
    assert checks(out) == ((1.0, "none", True, True, True, None) if passed
                           else (0.0, "string_similarity_below_threshold", True, True, False, None))


def test_row_threshold_overrides_the_configured_one(serve):
    url = serve(STRING_ONLY)  # configured 0.9
    out = verify(url, pivot_row(t2("ls -la\n"), threshold=0.85), response_of(json.dumps(t2("ls -al\n"))))
    assert (out["reward"], out["threshold"], out["string_similarity_passed"]) == (1.0, 0.85, True)  # 0.857 >= 0.85
    out = verify(url, pivot_row(t2("python reproduce_issue.py\n"), threshold=0.99),
                 response_of(json.dumps(t2("python3 reproduce_issue.py\n"))))
    assert (out["reward"], out["failure_reason"]) == (0.0, "string_similarity_below_threshold")  # 0.981 < 0.99
    out = verify(url, pivot_row(t2("ls\n"), threshold=1.0), response_of(json.dumps(t2("ls\n"))))
    assert out["reward"] == 1.0  # >= , not >
    out = verify(url, pivot_row(t2("ls\n"), threshold=0.0), response_of(json.dumps(t2("rm -rf /\n"))))
    assert out["reward"] == 1.0
    # a configured threshold when the row has none
    strict = serve({"terminus_judge.string_similarity_threshold": 0.99})
    out = verify(strict, pivot_row(t2("python reproduce_issue.py\n")), response_of(json.dumps(t2("python3 reproduce_issue.py\n"))))
    assert (out["reward"], out["threshold"]) == (0.0, None)
    loose = serve({"terminus_judge.string_similarity_threshold": 0.6})
    assert verify(loose, pivot_row(t2("ls -la\n")), response_of(json.dumps(t2("ls -la /testbed\n"))))["reward"] == 1.0


def test_similarity_joins_keystrokes_only(serve):
    url = serve(STRING_ONLY)
    gold = t2("cd /srv && ", "make\n")
    pred = {"analysis": "totally different words", "plan": "", "commands": [{"keystrokes": "cd /srv && make\n",
                                                                              "duration": 30}]}
    out = verify(url, pivot_row(gold), response_of(json.dumps(pred)))
    assert (out["similarity_score"], out["reward"]) == (1.0, 1.0)
    # both without keystrokes: 1.0; one without: 0.0
    out = verify(url, pivot_row(t2()), response_of(json.dumps(t2())))
    assert (out["similarity_score"], out["reward"]) == (1.0, 1.0)
    out = verify(url, pivot_row(t2()), response_of(json.dumps(t2("ls\n"))))
    assert (out["similarity_score"], out["reward"]) == (0.0, 0.0)


def test_terminus_response_fields_and_echo(serve):
    row = pivot_row(t2("ls\n"), extra_row_key="kept out")
    response = response_of(json.dumps(t2("ls\n")))
    out = verify(serve(STRING_ONLY), row, response)
    assert list(out) == ["responses_create_params", "response", "reward", "mask_sample", "failure_kind",
                         "failure_reason", "uuid", "expected_answer", "model_output", "parsed_output",
                         "similarity_score", "schema_check_passed", "task_complete_check_passed",
                         "string_similarity_passed", "judge_passed", "judge_evaluations", "metadata", "threshold"]
    assert out["response"] == response and out["mask_sample"] is False and out["failure_kind"] is None
    assert "agent_ref" not in out and "extra_row_key" not in out  # built field by field, as NeMo Gym
    rcp = out["responses_create_params"]
    assert rcp["input"] == [{"role": "user", "content": "Solve the task. Answer in JSON.", "type": "message"}]
    assert (rcp["parallel_tool_calls"], rcp["tool_choice"], rcp["tools"], rcp["temperature"]) == (True, "auto", [], None)


# ---- terminus_judge with the LLM judge -------------------------------------------------------------------------

JUDGE = {"terminus_judge.enable_llm_judge": True}
SWAP = {"terminus_judge.enable_llm_judge": True, "terminus_judge.check_twice_swap": True}


def below(url: str, **row_extra) -> dict:
    """A row whose keystrokes are 12/14 similar (below 0.9), so the judge decides."""
    return verify(url, pivot_row(t2("ls -la\n"), **row_extra), response_of(json.dumps(t2("ls -al\n"))))


def test_judge_not_called_when_similarity_passes(serve, fresh):
    out = verify(serve(JUDGE), pivot_row(t2("ls\n")), response_of(json.dumps(t2("ls\n"))))
    assert checks(out) == (1.0, "none", True, True, True, None) and fresh.requests == []


@pytest.mark.parametrize("reply,expected,label", [
    ("They match.\n\n[[A=B]] they are equivalent", (1.0, "none", True, True, False, True), "[[A=B]]"),
    ("Different scope.\n\n[[A!=B]] they are not equivalent", (0.0, "judge_not_equivalent", True, True, False, False),
     "[[A!=B]]"),
    ("I cannot decide.", (0.0, "judge_parsing_failed", True, True, False, None), None),
    (Reply(text=None), (0.0, "judge_parsing_failed", True, True, False, None), None),  # null content: no text
    ("", (0.0, "judge_parsing_failed", True, True, False, None), None),
    ("[[A = B]] [[a=b]] A=B", (0.0, "judge_parsing_failed", True, True, False, None), None),
])
def test_judge_verdicts(serve, fresh, reply, expected, label):
    fresh.default = reply
    out = below(serve(JUDGE))
    assert checks(out) == expected
    assert out["mask_sample"] is False and out["failure_kind"] is None  # no verdict is a score, not a failure
    assert len(fresh.requests) == 1 and [e["verdict_label"] for e in out["judge_evaluations"]] == [label]


FILLER = "x" * 250  # pushes what comes before it out of the last 200 characters


@pytest.mark.parametrize("text,equal", [
    ("[[A!=B]] at first, but finally [[A=B]]", True),  # both in the tail: the rightmost wins
    ("[[A=B]] at first, but finally [[A!=B]]", False),
    ("[[A=B]] early " + FILLER + " [[A!=B]]", False),  # only the tail counts when it has a label
    ("[[A!=B]] early " + FILLER + " [[A=B]]", True),
    ("[[A!=B]] then [[A=B]] " + FILLER, False),  # tail without a label: the FIRST label of the whole text
    ("[[A=B]] then [[A!=B]] " + FILLER, True),
])
def test_judge_verdict_last_200_characters_rule(serve, fresh, text, equal):
    fresh.default = text
    out = below(serve(JUDGE))
    assert (out["reward"], out["judge_passed"]) == ((1.0, True) if equal else (0.0, False))
    assert out["judge_evaluations"][0]["verdict_label"] == ("[[A=B]]" if equal else "[[A!=B]]")


def test_judge_request_shape(serve, fresh):
    fresh.default = "[[A=B]]"
    out = below(serve(JUDGE))
    (request,) = fresh.requests
    assert request["model"] == "fake-judge"
    (message,) = request["messages"]  # no system message unless judge_system_message is set
    assert message["role"] == "user"
    gold, candidate = json.dumps(t2("ls -la\n")), json.dumps(t2("ls -al\n"))
    assert message["content"].endswith(f"GOLD:\n{gold}\n\nCANDIDATE:\n{candidate}")  # raw gold, post-think text
    assert out["judge_evaluations"][0]["responses_create_params"] == request
    with_system = serve({**JUDGE, "terminus_judge.judge_system_message": "Be strict."})
    fresh.reset("[[A=B]]")
    below(with_system)
    assert fresh.requests[0]["messages"][0] == {"role": "system", "content": "Be strict."}


@pytest.mark.parametrize("second,reward,reason,passed", [
    ("[[A=B]]", 1.0, "none", True),
    ("[[A!=B]]", 0.0, "judge_not_equivalent", False),
    ("no verdict", 0.0, "judge_swap_parsing_failed", None),
])
def test_swap_check(serve, fresh, second, reward, reason, passed):
    fresh.default = lambda body, i: "[[A=B]]" if i == 0 else second
    out = below(serve(SWAP))
    assert (out["reward"], out["failure_reason"], out["judge_passed"]) == (reward, reason, passed)
    first_prompt, swapped_prompt = (r["messages"][-1]["content"] for r in fresh.requests)
    gold, candidate = json.dumps(t2("ls -la\n")), json.dumps(t2("ls -al\n"))
    assert first_prompt.endswith(f"GOLD:\n{gold}\n\nCANDIDATE:\n{candidate}")
    assert swapped_prompt.endswith(f"GOLD:\n{candidate}\n\nCANDIDATE:\n{gold}")
    assert [e["verdict_label"] for e in out["judge_evaluations"]][0] == "[[A=B]]"


def test_swap_not_tried_after_not_equivalent(serve, fresh):
    fresh.default = "[[A!=B]]"
    out = below(serve(SWAP))
    assert (out["reward"], out["failure_reason"], len(fresh.requests)) == (0.0, "judge_not_equivalent", 1)


def test_reward_if_swap_fails(serve, fresh):
    fresh.default = lambda body, i: "[[A=B]]" if i == 0 else "[[A!=B]]"
    out = below(serve({**SWAP, "terminus_judge.reward_if_swap_fails": -1.0}))
    assert (out["reward"], out["failure_reason"], out["judge_passed"]) == (-1.0, "judge_not_equivalent", False)


def test_judge_without_similarity_and_neither(serve, fresh):
    fresh.default = "[[A!=B]]"
    judge_only = serve({**JUDGE, "terminus_judge.enable_string_similarity": False})
    out = verify(judge_only, pivot_row(t2("ls\n")), response_of(json.dumps(t2("ls\n"))))  # identical, judge still asked
    assert checks(out) == (0.0, "judge_not_equivalent", True, True, None, False) and out["similarity_score"] is None
    neither = serve({"terminus_judge.enable_string_similarity": False})
    out = verify(neither, pivot_row(t2("ls\n")), response_of(json.dumps(t2("rm -rf /tmp/x\n"))))
    assert checks(out) == (1.0, "none", True, True, None, None)


def test_terminus_example_rows(serve):
    """The verbatim NeMo Gym rows: the gold action as the answer scores 1.0 in both harnesses."""
    rows = [json.loads(line) for line in (EXAMPLES / "terminus_judge_example.jsonl").read_text().splitlines()]
    assert [r["metadata"]["harness"] for r in rows] == ["terminus_2", "terminus_1"]
    for row in rows:
        out = verify(serve(STRING_ONLY), row, make_response(row["expected_answer"]))
        assert checks(out) == (1.0, "none", True, True, True, None) and out["similarity_score"] == 1.0
        assert out["uuid"] == row["uuid"] and out["metadata"] == row["metadata"]


def test_terminus_verify_response_example(serve, fresh):
    """NeMo Gym's own verify response (example_rollouts row 5, terminus_judge_simple: judge + swap, threshold 0.9):
    the same row and response give the same check fields. Its similarity 0.33613445378151263 is 40/119 (gold
    keystrokes 68 characters, the policy's 51, 20 matched). The judge said [[A=B]], then [[A!=B]] on the swap, so
    reward_if_swap_fails (0.0). NeMo Gym's file still carries the old failure code `judge_evaluation_failed`;
    the current code (and this server) says `judge_not_equivalent`."""
    example = json.loads((EXAMPLES / "terminus_judge_verify_response_example.jsonl").read_text().splitlines()[0])
    row = json.loads((EXAMPLES / "terminus_judge_example.jsonl").read_text().splitlines()[0])
    assert row["uuid"] == example["uuid"]
    response = json.loads(json.dumps(example["response"]))
    # the saved example truncates long strings; the policy's action is rebuilt from parsed_output (keystrokes whole)
    response["output"][0]["content"][0]["text"] = json.dumps(example["parsed_output"], indent=2)
    fresh.default = lambda body, i: ["Reasoning: ... [[A=B]]", "Reasoning: ... [[A!=B]]"][i]
    out = verify(serve({**SWAP, "terminus_judge.string_similarity_threshold": 0.9}), row, response)
    for key in ("reward", "similarity_score", "schema_check_passed", "task_complete_check_passed",
                "string_similarity_passed", "judge_passed", "uuid", "metadata", "threshold", "parsed_output"):
        assert out[key] == example[key], key
    assert out["similarity_score"] == 40 / 119
    assert [e["verdict_label"] for e in out["judge_evaluations"]] == \
        [e["verdict_label"] for e in example["judge_evaluations"]] == ["[[A=B]]", "[[A!=B]]"]
    assert (out["failure_reason"], example["failure_reason"]) == ("judge_not_equivalent", "judge_evaluation_failed")
    assert out["responses_create_params"] == example["responses_create_params"]  # echoed with NeMo Gym's defaults
    assert out["response"] == response


# ---- multichallenge -------------------------------------------------------------------------------------------

MC = {"environment": "multichallenge"}


def mc_row(rubric, context="[USER]: hi", **extra) -> dict:
    return {"uuid": "m-1", "task_id": 7, "responses_create_params": {"input": [{"role": "user", "content": "hi"}]},
            "rubric": rubric, "context": context, "metadata": {"topic": "t"},
            "agent_ref": {"type": "responses_api_agents", "name": "multichallenge_simple_agent"}, **extra}


def q(question, pass_criteria="YES", **extra) -> dict:
    return {"question": question, "pass_criteria": pass_criteria, **extra}


def test_multichallenge_example_rows(serve, fresh):
    rows = [json.loads(line) for line in (EXAMPLES / "multichallenge_example.jsonl").read_text().splitlines()]
    fresh.rules = [("avoid suggesting peanuts", "No peanuts were suggested.\n[[YES]]"),
                   ("by their name", "The name Alex is not used.\n[[NO]]"),
                   ("Tokyo?", "Generic Japan list.\n[[NO]]")]
    out = verify(serve(), rows[0], make_response("How about apple slices with sunflower butter?"))
    assert (out["reward"], out["num_passed"], out["num_total"], out["aggregation_mode"]) == (0.5, 1, 2, "mean")
    assert [e["verdict"] for e in out["rubric_evaluations"]] == ["YES", "NO"]
    assert [e["score"] for e in out["rubric_evaluations"]] == [1.0, 0.0]
    # the judge prompt: NeMo Gym's class-default template and system message, filled with the row's context
    template = ("You are evaluating whether a model's response meets a specific criterion.\n\nCONVERSATION CONTEXT:\n"
                "{context}\n\nMODEL'S FINAL RESPONSE:\n{response}\n\nEVALUATION QUESTION:\n{question}\n\nEXPECTED ANSWER: "
                "{pass_criteria}\n\nDoes the model's response satisfy the criterion described in the evaluation "
                "question?\nAnalyze carefully, then respond with exactly [[YES]] or [[NO]] on the last line.")
    first = next(r["messages"] for r in fresh.requests  # items are judged in parallel: any order
                 if rows[0]["rubric"][0]["question"] in r["messages"][1]["content"])
    assert first[0] == {"role": "system", "content": "You are a precise evaluator. Assess responses objectively "
                                                     "based on the given criteria."}
    assert first[1]["content"] == template.format(context=rows[0]["context"], question=rows[0]["rubric"][0]["question"],
                                                  response="How about apple slices with sunflower butter?",
                                                  pass_criteria="YES")
    assert out["rubric_evaluations"][0]["judge_prompt"] == first[1]["content"]
    assert out["context"] == rows[0]["context"] and "rubric" not in out
    assert (out["uuid"], out["task_id"], out["agent_ref"], out["metadata"]) == (
        "example_1", 1, rows[0]["agent_ref"], rows[0]["metadata"])  # the rest of the row is echoed
    out = verify(serve(), rows[1], make_response("Try sushi at Tsukiji and tempura."))
    assert (out["reward"], out["num_passed"], out["num_total"]) == (pytest.approx(2 / 3), 2, 3)


@pytest.mark.parametrize("judge_text,verdict", [
    ("[[NO]] at first... on reflection [[YES]]", "YES"),  # the later label wins
    ("[[YES]] at first... on reflection [[NO]]", "NO"),
    ("Reasoning.\nYes, it does.", "YES"),  # no label: a last line containing YES (upper-cased)
    ("It says yes somewhere.\nNOT SURE", "NO"),
    ("It says yes somewhere.\nmaybe", "NO"),  # the default
    ("", "NO"),
    ("<think>[[YES]]</think>[[NO]]", "NO"),  # think blocks of the judge are stripped
    ("[[YES]]\n\n<think>scratch [[NO]]</think>", "YES"),
])
def test_multichallenge_verdict_parsing(serve, fresh, judge_text, verdict):
    fresh.default = judge_text
    out = verify(serve(MC), mc_row([q("Q?")]), make_response("answer"))
    assert out["rubric_evaluations"][0]["verdict"] == verdict
    assert out["reward"] == (1.0 if verdict == "YES" else 0.0) and out["mask_sample"] is False


@pytest.mark.parametrize("pass_criteria,verdict,score", [
    ("YES", "[[YES]]", 1.0), ("YES", "[[NO]]", 0.0), ("NO", "[[NO]]", 1.0), ("NO", "[[YES]]", 0.0),
    ("no", "[[NO]]", 1.0),  # compared upper-cased
    ("MAYBE", "[[YES]]", 1.0), ("MAYBE", "[[NO]]", 0.0),  # any other value counts YES as pass
])
def test_multichallenge_pass_criteria(serve, fresh, pass_criteria, verdict, score):
    fresh.default = verdict
    out = verify(serve(MC), mc_row([q("Q?", pass_criteria)]), make_response("answer"))
    assert out["rubric_evaluations"][0]["score"] == out["reward"] == score


# scores [1, 0, 1] with weights [2, 1, 1]
@pytest.mark.parametrize("mode,reward", [("mean", 2 / 3), ("min", 0.0), ("max", 1.0), ("all", 0.0), ("any", 1.0),
                                         ("weighted", 3 / 4)])
def test_multichallenge_aggregation(serve, fresh, mode, reward):
    fresh.rules = [("pass-a", "[[YES]]"), ("fail-b", "[[NO]]"), ("pass-c", "[[YES]]")]
    rubric = [q("pass-a", weight=2), q("fail-b"), q("pass-c")]
    out = verify(serve({**MC, "multichallenge.aggregation_mode": mode}), mc_row(rubric), make_response("x"))
    assert out["reward"] == pytest.approx(reward) and out["aggregation_mode"] == mode
    assert (out["num_passed"], out["num_total"]) == (2, 3)
    assert [e["weight"] for e in out["rubric_evaluations"]] == [2.0, 1.0, 1.0]


def test_multichallenge_all_any_edges(serve, fresh):
    fresh.default = "[[YES]]"
    assert verify(serve({**MC, "multichallenge.aggregation_mode": "all"}), mc_row([q("a"), q("b")]),
                  make_response("x"))["reward"] == 1.0
    fresh.default = "[[NO]]"
    assert verify(serve({**MC, "multichallenge.aggregation_mode": "any"}), mc_row([q("a"), q("b")]),
                  make_response("x"))["reward"] == 0.0
    out = verify(serve({**MC, "multichallenge.aggregation_mode": "weighted"}), mc_row([q("a", weight=0)]),
                 make_response("x"))
    assert out["reward"] == 0.0  # total weight 0


@pytest.mark.parametrize("mode", ["mean", "min", "max", "all", "any", "weighted"])
def test_multichallenge_empty_rubric_is_zero(serve, fresh, mode):
    out = verify(serve({**MC, "multichallenge.aggregation_mode": mode}), mc_row([]), make_response("x"))
    assert (out["reward"], out["num_total"], out["rubric_evaluations"]) == (0.0, 0, [])
    assert fresh.requests == []


def test_multichallenge_fallbacks_and_response_text(serve, fresh):
    fresh.default = "[[YES]]"
    row = mc_row(None, context=None)
    row["metadata"] = {"rubric": [q("Q?")], "messages": [
        {"role": "system", "content": "Be kind."}, {"role": "thinking", "content": "hidden"},
        {"role": "user", "content": "hi"}]}
    response = response_of("first answer", "<think>plan</think>\n final answer ", reasoning="ignored")
    out = verify(serve(MC), row, response)
    assert out["context"] == "[SYSTEM]: Be kind.\n\n[USER]: hi"
    assert out["generated_response"] == "final answer" and out["num_total"] == 1
    out = verify(serve(MC), mc_row([q("Q?")]), response_of("chain of thought</think>Final"))  # unpaired close tag
    assert out["generated_response"] == "Final"
    out = verify(serve(MC), mc_row([q("Q?")]), response_of("<thinking>x</thinking>Done"))
    assert out["generated_response"] == "Done"


# ---- verifif --------------------------------------------------------------------------------------------------

VF = {"environment": "verifif"}


def vf_row(items, instructions=(), **extra) -> dict:
    return {"id": 1, "instructions": list(instructions), "llm_judge": items, "language": "en",
            "responses_create_params": {"input": [{"role": "user", "content": "write"}]},
            "agent_ref": {"type": "responses_api_agents", "name": "turing_vif_simple_agent"}, **extra}


def item(uid, content, pass_criteria=None, source="system", mis=False) -> dict:
    out = {"uid": uid, "content": content, "source": source, "is_misalignment_check": mis}
    if pass_criteria:
        out["pass_criteria"] = pass_criteria
    return out


def test_verifif_example_row_llm_judge_part(serve, fresh):
    """NeMo Gym's example row: its five llm_judge items judged as in the example verify response (Passed, Passed,
    Failed, Passed, Passed) give reward 0.0 under `all`, with the same per-item results."""
    row = json.loads((EXAMPLES / "verifif_example.jsonl").read_text().splitlines()[0])
    example = json.loads((EXAMPLES / "verifif_verify_response_example.jsonl").read_text().splitlines()[0])
    judged = [r for r in example["validation_results"] if r["instruction"].startswith("llm_judge_")]
    assert [r["status"] for r in judged] == ["Passed", "Passed", "Failed", "Passed", "Passed"]
    fresh.default = "Le modèle répond positivement.\n[[YES]]"
    fresh.rules = [("l'équilibre entre un message", "Déséquilibre.\n[[NO]]")]
    scored = dict(row, instructions=[], agent_ref={"type": "responses_api_agents", "name": "turing_vif_simple_agent"})
    out = verify(serve(), scored, make_response("Début du brouillon communautaire ..."))
    assert (out["reward"], out["follow_all_instructions"]) == (0.0, example["follow_all_instructions"])
    assert out["follow_instruction_list"] == example["follow_instruction_list"][5:] == [True, True, False, True, True]
    assert [(r["instruction"], r["status"]) for r in out["validation_results"]] == \
        [(r["instruction"], r["status"]) for r in judged]
    assert out["mask_sample"] is False and out["failure_kind"] is None
    # the judge call: the question prompt as the system message, a fixed user message, verifif.yaml's sampling
    request = fresh.requests[0]
    assert request["messages"][1] == {"role": "user", "content": "Evaluate the response."}
    assert request["messages"][0]["content"].startswith("\nYou are an impartial LLM-Judge.")
    assert "QUESTION TO EVALUATE AGAINST:\n" + row["llm_judge"][0]["content"] in request["messages"][0]["content"]
    # NeMo Gym's LLM_JUDGE_QUESTION_PROMPT, word for word (with its leading and trailing newline)
    question_prompt = ("\nYou are an impartial LLM-Judge. Evaluate the model response based strictly on the specific "
                       "question provided below.\n\nQUESTION TO EVALUATE AGAINST:\n{question}\n\nMODEL RESPONSE TO "
                       "EVALUATE:\n{model_response}\n\nDoes the model's response satisfy the criterion described in "
                       "the evaluation question?\nAnalyze carefully, then respond with exactly [[YES]] or [[NO]] on "
                       "the last line.\n")
    system_prompts = {r["messages"][0]["content"] for r in fresh.requests}
    assert system_prompts == {question_prompt.format(question=i["content"], model_response="Début du brouillon "
                                                     "communautaire ...") for i in row["llm_judge"]}
    assert (request["temperature"], request["top_p"], request["max_tokens"]) == (0.7, 0.8, 10000)
    # echo: the model's fields with defaults, not the row's other keys
    assert out["llm_judge"][0]["pass_criteria"] == "YES" and out["language"] == "fre" and out["prompt"] is None
    assert "agent_ref" not in out


def test_verifif_example_row_with_instructions_is_masked_as_unsupported(serve, fresh):
    row = json.loads((EXAMPLES / "verifif_example.jsonl").read_text().splitlines()[0])
    out = verify(serve(), dict(row, agent_ref={"name": "verifif_simple_agent"}), make_response("Début ..."))
    ids = ["startend:start_checker", "length_constraints:number_words", "keywords:frequency",
           "keywords:forbidden_words", "startend:end_checker"]
    assert (out["reward"], out["mask_sample"], out["failure_kind"]) == (0.0, True, "unsupported_instruction")
    assert out["unsupported"] == ids and all(i in out["failure_reason"] for i in ids)
    assert [r["status"] for r in out["validation_results"]] == ["Skipped"] * 5
    assert fresh.requests == []  # never scored, never judged


@pytest.mark.parametrize("pass_criteria,judge_text,passed", [
    (None, "[[YES]]", True), (None, "[[NO]]", False),
    ("NO", "[[NO]]", True), ("NO", "[[YES]]", False),  # pass_criteria NO inverts
    (None, "[[NO]] hmm, actually [[YES]]", True), (None, "[[YES]] hmm, actually [[NO]]", False),
    (None, "Reasoning\nYES", True), (None, "Reasoning\n  no  ", False),  # last line exactly YES / NO
    (None, "Reasoning\nyes.", False),  # neither: the item fails
    ("NO", "Reasoning\nyes.", True),  # ... and pass_criteria NO inverts that failure into a pass, as NeMo Gym
    (None, "<think>[[NO]]</think>[[YES]]", True),
])
def test_verifif_llm_judge_items(serve, fresh, pass_criteria, judge_text, passed):
    fresh.default = judge_text
    out = verify(serve(VF), vf_row([item(1, "Is it polite?", pass_criteria)]), make_response("Hello!"))
    assert out["follow_instruction_list"] == [passed] and out["reward"] == float(passed)
    if "[[" not in judge_text and judge_text.strip().rsplit("\n", 1)[-1].strip().upper() not in ("YES", "NO"):
        assert out["validation_results"][0]["message"].startswith("No [[YES]]/[[NO]] marker found in judge response: ")


@pytest.mark.parametrize("source,mis,judge_text,passed,message", [
    ("user", True, "[[YES]]", False, "Response misaligns with system instruction."),
    ("user", True, "[[NO]]", True, "No Error"),
    ("system", True, "[[YES]]", True, "[[YES]]"),  # inversion only for source == user
    ("user", False, "[[YES]]", True, "[[YES]]"),
])
def test_verifif_misalignment_inversion(serve, fresh, source, mis, judge_text, passed, message):
    fresh.default = judge_text
    out = verify(serve(VF), vf_row([item(1, "Did it follow the user?", source=source, mis=mis)]), make_response("x"))
    assert out["follow_instruction_list"] == [passed]
    assert out["validation_results"][0]["message"] == message


# follow list [True, False, True]
@pytest.mark.parametrize("mode,reward", [("all", 0.0), ("any", 1.0), ("mean", 2 / 3), ("min", 0.0), ("max", 1.0)])
def test_verifif_aggregation(serve, fresh, mode, reward):
    fresh.rules = [("fails", "[[NO]]")]
    fresh.default = "[[YES]]"
    items = [item(1, "passes 1"), item(2, "fails"), item(3, "passes 2")]
    out = verify(serve({**VF, "verifif.aggregation_mode": mode}), vf_row(items), make_response("x"))
    assert out["reward"] == pytest.approx(reward) and out["follow_instruction_list"] == [True, False, True]
    assert out["follow_all_instructions"] is False


def test_verifif_no_checks_is_one(serve, fresh):
    out = verify(serve(VF), vf_row([]), make_response("anything"))
    assert (out["reward"], out["follow_all_instructions"], out["follow_instruction_list"]) == (1.0, True, [])
    assert fresh.requests == []


def test_verifif_schema_errors_score_zero(serve, fresh):
    out = verify(serve(VF), vf_row([item(1, "a"), item(1, "b")]), make_response("x"))
    assert (out["reward"], out["mask_sample"], out["follow_instruction_list"]) == (0.0, False, [False])
    assert out["validation_results"] == [{"instruction": "schema_validation", "status": "Failed", "message":
                                          "llm_judge at index 1: duplicate 'uid' value '1' (first seen at llm_judge at index 0)"}]
    bad = [{"instruction_id": "startend:end_checker", "uid": 5, "end_phrase": "x"},  # no source, no flag
           {"instruction_id": "punctuation:no_comma", "uid": 5, "source": "bot", "is_misalignment_check": "no"},
           {"uid": 9}]
    out = verify(serve(VF), vf_row([item(5, "dup of an instruction uid")], instructions=bad), make_response("x"))
    assert out["reward"] == 0.0 and out["mask_sample"] is False
    assert [r["message"] for r in out["validation_results"]] == [
        "Instruction 'startend:end_checker': must have a 'source' field",
        "Instruction 'startend:end_checker': must have an 'is_misalignment_check' field",
        "Instruction 'punctuation:no_comma' at index 1: duplicate 'uid' value '5' (first seen at instruction "
        "'startend:end_checker' at index 0)",
        "Instruction 'punctuation:no_comma': invalid 'source' value 'bot'. Must be 'user' or 'system'.",
        "Instruction 'punctuation:no_comma': 'is_misalignment_check' must be a boolean, got 'no'.",
        "Instruction at index 2: must have an 'instruction_id' field",
        "llm_judge at index 0: duplicate 'uid' value '5' (first seen at instruction 'startend:end_checker' at index 0)",
    ]
    assert fresh.requests == []


def test_verifif_response_text_is_the_last_message_without_thinking(serve, fresh):
    fresh.default = "[[YES]]"
    verify(serve(VF), vf_row([item(1, "Q")]), response_of("old", "<think>hidden</think>Final words"))
    assert "MODEL RESPONSE TO EVALUATE:\nFinal words\n" in fresh.requests[0]["messages"][0]["content"]


def test_routing_by_agent_name(serve, fresh):
    fresh.default = "[[YES]]"
    url = serve()
    for name in ("verifif_simple_agent", "turing_vif_simple_agent", "verifif"):
        out = verify(url, dict(vf_row([]), agent_ref={"name": name}), make_response("x"))
        assert "follow_all_instructions" in out
    for name in ("multichallenge_simple_agent", "multichallenge"):
        assert "rubric_evaluations" in verify(url, dict(mc_row([]), agent_ref={"name": name}), make_response("x"))
    for name in ("terminus_judge_simple_agent", "terminus_judge_string_only_simple_agent", "terminus_judge"):
        out = verify(url, dict(pivot_row(t2("ls\n")), agent_ref={"name": name}), make_response(json.dumps(t2("ls\n"))))
        assert out["reward"] == 1.0 and out["judge_evaluations"] == []  # string-only by default
