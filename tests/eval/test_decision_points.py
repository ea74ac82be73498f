"""eval/decision_points.py: a JSONL of pivot rows as an eval suite. Each row's answer from a served model is scored by
a real reward server on loopback (string-only terminus_judge); a model call that fails is an infrastructure failure,
counted and out of the mean; a bad file is one line naming the line."""

import asyncio
import json
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import pytest
from conftest import REPO, run

from common.errors import UserError
from eval.decision_points import _score_rows, is_decision_point_suite, read_rows
from eval.metrics import compute_metrics
from eval.settings import EvalSettings
from rewards.local import local_reward_server

ROWS = [json.loads(line) for line in (REPO / "data" / "pivot" / "terminal_pivot.jsonl").read_text().splitlines()[:6]]
WRONG = json.dumps({"analysis": "x", "plan": "y", "commands": [{"keystrokes": "rm -rf /tmp/nothing-alike\n",
                                                                 "duration": 1.0}], "task_complete": False})


class Model(BaseHTTPRequestHandler):
    """A stand-in policy: the teacher's answer for rows 0-1, a wrong action for rows 2-3, HTTP 500 for the others
    (told apart by the prompt's last message). Only the model is a stand-in: what it answers is the point."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        last = body["messages"][-1]["content"]
        index = next(i for i, row in enumerate(ROWS) if row["responses_create_params"]["input"][-1]["content"] == last)
        if index >= 4:
            self.send_response(500)
            self.end_headers()
            return
        answer = ROWS[index]["expected_answer"] if index < 2 else WRONG
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_rows_are_scored_by_the_reward_server_and_failed_calls_are_not_scores():
    assert len({row["responses_create_params"]["input"][-1]["content"] for row in ROWS}) == len(ROWS)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with local_reward_server("configs/rewards/terminus_judge_string_only.yaml") as reward_url:
            settings = EvalSettings(suite="rows.jsonl", temperature=0.0, max_tokens=64, concurrency=2)
            trials = asyncio.run(_score_rows(ROWS, f"http://127.0.0.1:{server.server_port}/v1", "m", reward_url,
                                             settings, None))
    finally:
        server.shutdown()
    assert [t["reward"] for t in trials] == [1.0, 1.0, 0.0, 0.0, None, None]
    assert [t["outcome"] for t in trials] == ["scored"] * 4 + ["infra_failure"] * 2
    assert all("model call" in t["exception"] for t in trials[4:])
    assert [t["trial"] for t in trials] == [row["uuid"] for row in ROWS]
    metrics = compute_metrics(trials)
    assert metrics["mean_reward"] == 0.5 and metrics["n_scored"] == 4 and metrics["n_infra_errors"] == 2


def test_a_bad_file_is_one_line_naming_the_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"responses_create_params": {"input": []}}) + "\n")
    assert is_decision_point_suite(str(path)) and not is_decision_point_suite(str(tmp_path))
    with pytest.raises(UserError, match=rf"^{path}:2: not a decision point .*trainers.data pivots`$"):
        read_rows(str(path))
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UserError, match="no decision points"):
        read_rows(str(tmp_path / "empty.jsonl"))


def test_eval_run_scores_a_decision_point_file_on_a_checkpoint(tmp_path):
    """`python -m eval.run --checkpoint DIR --suite F.jsonl`: the CPU server and a reward server, end to end; the
    results file in the checkpoint, one trial per row (random weights: every row scored, none right)."""
    from modeling.tiny_model import resolve_model

    checkpoint = tmp_path / "checkpoint-7"
    shutil.copytree(resolve_model("builtin:tiny-qwen3"), checkpoint)
    suite = tmp_path / "heldout.jsonl"
    suite.write_text("".join(json.dumps(row) + "\n" for row in ROWS[:2]))
    done = run([sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint), "--suite",
                str(suite), "--temperature", "0", "--max_tokens", "16"], timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads((checkpoint / "eval_results.json").read_text())
    assert results["global_step"] == 7 and results["suite"] == str(suite)
    assert results["metrics"]["n_trials"] == 2 and results["metrics"]["n_scored"] == 2
    assert results["metrics"]["mean_reward"] == 0.0
