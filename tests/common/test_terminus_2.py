"""common/terminus_2.py against Harbor's own Terminus-2 (0.25, in .venv-harbor): the template byte for byte, the parser
field by field on a corpus of responses, the output limit, the confirmation text and the scrollback diff."""

import json
import re
import subprocess

import pytest
from conftest import REPO

from common import terminus_2 as t2

HARBOR_PYTHON = REPO / ".venv-harbor" / "bin" / "python"
HARBOR_TERMINUS = REPO / ".venv-harbor" / "lib" / "python3.12" / "site-packages" / "harbor" / "agents" / "terminus_2"

OK = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls -la\n", "duration": 0.1}], "task_complete": False}


def js(**overrides) -> str:
    return json.dumps({**OK, **overrides})


CLEAN = js()
CORPUS = [
    # clean, complete, indented, empty commands
    CLEAN, js(task_complete=True), json.dumps(OK, indent=2), js(commands=[]), js(commands=[], task_complete=True),
    json.dumps({"analysis": "a", "plan": "p", "commands": []}),
    # think prefixes, fences, extra text
    "<think>let me see</think>\n" + CLEAN, "<think>{x: 1} is not json</think>" + CLEAN,
    "<think>{\"a\": 1}</think>" + CLEAN, "```json\n" + CLEAN + "\n```", "Here you go:\n" + CLEAN + "\nDone.",
    CLEAN + "\n" + js(plan="second"), CLEAN + CLEAN,
    # truncated / unbalanced
    CLEAN[:-1], CLEAN[:-3], CLEAN[:40], CLEAN[: len(CLEAN) // 2], '{"analysis": "a", "plan": "p", "commands": [',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 1}]', "{", "}", "{}",
    "", "   ", "no json at all", "null", "[1, 2]", '"just a string"', "} {", "}{" + CLEAN,
    # missing fields
    json.dumps({"plan": "p", "commands": []}), json.dumps({"analysis": "a", "commands": []}),
    json.dumps({"analysis": "a", "plan": "p"}), json.dumps({"task_complete": True}),
    # wrong types
    js(analysis=3), js(plan=["x"]), js(analysis=None, plan={"k": 1}), js(commands="ls\n"), js(commands={"k": "ls"}),
    js(commands=["ls\n"]), js(commands=[{"duration": 1}]), js(commands=[{"keystrokes": 5, "duration": 1}]),
    js(commands=[{"keystrokes": "ls\n", "duration": "1"}]), js(commands=[{"keystrokes": "ls\n", "duration": None}]),
    js(commands=[{"keystrokes": "ls\n", "duration": True}]), js(commands=[{"keystrokes": "ls\n", "duration": 120}]),
    js(commands=[{"keystrokes": "ls\n", "duration": -1}]), js(commands=[{"keystrokes": "ls\n", "duration": 1e300}]),
    js(commands=["ls\n"], task_complete=True), js(commands=[{"duration": 1}], task_complete="true"),
    # task_complete as string / other types
    js(task_complete="true"), js(task_complete="True"), js(task_complete="yes"), js(task_complete="1"),
    js(task_complete="no"), js(task_complete="false"), js(task_complete=1), js(task_complete=0),
    js(task_complete=None), js(task_complete=[1]), js(task_complete={}),
    # durations and newlines
    js(commands=[{"keystrokes": "ls\n"}, {"keystrokes": "pwd\n"}]),
    js(commands=[{"keystrokes": "ls", "duration": 0.1}, {"keystrokes": "pwd\n", "duration": 0.1}]),
    js(commands=[{"keystrokes": "", "duration": 5}, {"keystrokes": "pwd", "duration": 0.1}]),
    js(commands=[{"keystrokes": "C-c", "duration": 0.1}, {"keystrokes": "echo hi\n", "duration": 0.1}]),
    js(commands=[{"keystrokes": "ls\n", "duration": 0}, {"keystrokes": "\n", "duration": 0.5}]),
    # extra keys, field order
    js(commands=[{"keystrokes": "ls\n", "duration": 1, "is_blocking": True}]), js(extra="x"),
    js(commands=[{"keystrokes": "ls\n", "duration": 1, "ERROR:": 1}]),
    json.dumps({"plan": "p", "analysis": "a", "commands": []}),
    json.dumps({"commands": [], "plan": "p", "analysis": "a", "task_complete": True}),
    '{"analysis": "mentions \\"plan\\": here", "plan": "p", "commands": []}',
    # unicode, escapes, quotes and braces in strings
    js(analysis="héllo wörld ✓ 日本語", commands=[{"keystrokes": "echo 'ünïcode ✓'\n", "duration": 0.1}]),
    js(commands=[{"keystrokes": "printf '%s\\n' \"{a}\" '}}'\n", "duration": 0.1}]),
    js(commands=[{"keystrokes": "echo \\\\ \\t \\\"q\\\"\n", "duration": 0.1}]),
    '{"analysis": "a\\\\", "plan": "p", "commands": []}', '{"analysis": "a", "plan": "p", "commands": [], }',
    "{'analysis': 'a', 'plan': 'p', 'commands': []}", '{"analysis": "a" "plan": "p", "commands": []}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": 1}]}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": true} trailing {"x": 1}',
    '{"analysis": "a", "plan": "p", "commands": [], "task_complete": NaN}',
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "sleep 1\\n", "duration": Infinity}]}',
    # very long
    js(analysis="x" * 50_000, commands=[{"keystrokes": "echo " + "y" * 30_000 + "\n", "duration": 0.1}]),
    js(commands=[{"keystrokes": f"echo {i}\n", "duration": 0.1} for i in range(200)]),
    "noise " * 2000 + CLEAN[:300],
]

HARBOR_SIDE = r"""
import asyncio, json, sys
from types import SimpleNamespace
from harbor.agents.terminus_2.terminus_json_plain_parser import TerminusJSONPlainParser
from harbor.agents.terminus_2.terminus_2 import Terminus2
from harbor.agents.terminus_2.tmux_session import TmuxSession
job = json.load(sys.stdin)
parser = TerminusJSONPlainParser()
out = {"parse": [], "limit": [], "confirm": [], "diff": []}
for text in job["parse"]:
    r = parser.parse_response(text)
    out["parse"].append({"commands": [[c.keystrokes, c.duration] for c in r.commands], "is_task_complete":
                         r.is_task_complete, "error": r.error, "warning": r.warning, "analysis": r.analysis,
                         "plan": r.plan})
out["limit"] = [Terminus2._limit_output_length(None, s) for s in job["limit"]]
me = SimpleNamespace(options=SimpleNamespace(parser_name="json"))
out["confirm"] = [Terminus2._get_completion_confirmation_message(me, s) for s in job["limit"][:3]]
for previous, current in job["diff"]:
    out["diff"].append(asyncio.run(TmuxSession._find_new_content(SimpleNamespace(_previous_buffer=previous), current)))
json.dump(out, sys.stdout)
"""

LIMIT_CASES = ["", "short", "a" * 10_000, "a" * 10_001, "é" * 5_001, "日本" * 3000, "x" * 4_999 + "✓" * 3000,
               "\n".join(f"line {i}" for i in range(5000))]
DIFF_CASES = [("", "root@sandbox:/app# "), ("root@sandbox:/app# ", "root@sandbox:/app# ls\na b\nroot@sandbox:/app# "),
              ("p$ one\np$ ", "p$ one\np$ two\nout\np$ "), ("first\n\n\n", "first\nsecond\n"),
              ("gone", "cleared screen"), ("a\nb", "zzzzzzzzz a\nb and more"), ("same\n", "same\n")]


def _normalised(warning: str) -> str:
    # Harbor joins a command's unknown keys from a set, whose order changes with the hash seed: compare them sorted
    return re.sub(r"Unknown fields: ([^\n]*)", lambda m: "Unknown fields: " + ", ".join(sorted(m[1].split(", "))),
                  warning)


@pytest.fixture(scope="module")
def harbor():
    if not HARBOR_PYTHON.exists():
        pytest.fail(f"{HARBOR_PYTHON} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    job = {"parse": CORPUS, "limit": LIMIT_CASES, "diff": DIFF_CASES}
    result = subprocess.run([str(HARBOR_PYTHON), "-c", HARBOR_SIDE], input=json.dumps(job), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def test_the_template_is_harbors_file_byte_for_byte():
    assert t2.PROMPT_TEMPLATE.encode() == (HARBOR_TERMINUS / "templates" / "terminus-json-plain.txt").read_bytes()
    message = t2.first_message("Do X.", "Current Terminal Screen:\nroot@sandbox:/app# ")
    assert message.endswith("Task Description:\nDo X.\n\nCurrent terminal state:\nCurrent Terminal Screen:\n"
                            "root@sandbox:/app# \n") and "{{" not in message


def test_the_corpus_is_varied_enough():
    assert len(CORPUS) >= 60 and len(set(CORPUS)) == len(CORPUS)


@pytest.mark.parametrize("index", range(len(CORPUS)))
def test_parse_matches_harbor_field_by_field(harbor, index):
    theirs = harbor["parse"][index]
    ours = t2.parse_response(CORPUS[index])
    assert [[c.keystrokes, c.duration] for c in ours.commands] == theirs["commands"]
    # as JSON: the value and its type (NaN included, which equals nothing)
    assert json.dumps(ours.is_task_complete) == json.dumps(theirs["is_task_complete"])
    assert ours.error == theirs["error"]
    assert _normalised(ours.warning) == _normalised(theirs["warning"])
    assert (ours.analysis, ours.plan) == (theirs["analysis"], theirs["plan"])


def test_output_limit_confirmation_and_scrollback_diff_match_harbor(harbor):
    assert [t2.limit_output(s) for s in LIMIT_CASES] == harbor["limit"]
    assert [t2.confirmation_message(s) for s in LIMIT_CASES[:3]] == harbor["confirm"]
    assert [t2._new_content(p, c) for p, c in DIFF_CASES] == harbor["diff"]


def test_turns_feedback_confirmation_and_double_limit():
    turns = t2.Turns()
    turns.read("not json")
    assert turns.failed and turns.commands == []
    text, done = turns.observe(None)
    assert text == ("Previous response had parsing errors:\nERROR: No valid JSON found in response\nWARNINGS: - No "
                    "valid JSON object found\n\nPlease fix these issues and provide a proper JSON response.") and not done
    # a warning (no duration: 1 s); a wait capped at 60 s
    turns.read(js(commands=[{"keystrokes": "ls\n", "duration": 99}, {"keystrokes": "pwd\n"}]))
    assert [c.duration for c in turns.commands] == [60.0, 1.0]
    long = "New Terminal Output:\n" + "z" * 20_000
    text, done = turns.observe(t2.limit_output(long))
    # warnings first; the limited output is limited once more, as Harbor does (its marker cut out of the middle)
    assert text.startswith("Previous response had warnings:\nWARNINGS: - ") and not done
    assert text.count("[... output limited to 10000 bytes;") == 1
    turns.read(js(task_complete=True))
    text, done = turns.observe("Current Terminal Screen:\n$ ")
    assert text.startswith("Current terminal state:\nCurrent Terminal Screen:\n$ \n\nAre you sure") and not done
    turns.read(CLEAN)  # not complete: the pending completion is forgotten
    assert turns.observe("x") == ("x", False)
    turns.read(js(task_complete=True))
    assert not turns.observe("y")[1]
    turns.read("garbage")  # a parse error keeps the pending completion
    assert not turns.observe(None)[1]
    turns.read(js(task_complete=True, commands=[]))
    assert turns.observe("z") == ("z", True)
    turns.read(js(commands=[{"keystrokes": "ls\n", "duration": 1, "ERROR:": 1}]))  # "ERROR:" in a warning: no command
    assert turns.failed and turns.commands == []
