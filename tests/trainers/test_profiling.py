"""trainers/profiling.py and `python -m trainers.data profile`: K samples per pivot row from a served policy, each
scored by a real reward server on loopback (string-only terminus_judge). The filter keeps the rows whose rewards vary;
a failed model call is counted and never a 0; a rerun samples only the rows not done; a dead endpoint is one line
naming its URL. End to end on the embedded model served by the CPU server."""

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import REPO

from trainers import data, profiling
from rewards.local import local_reward_server

ROWS = [json.loads(line) for line in (REPO / "data" / "pivot" / "terminal_pivot.jsonl").read_text().splitlines()[:5]]
WRONG = json.dumps({"analysis": "x", "plan": "y", "commands": [{"keystrokes": "rm -rf /tmp/nothing-alike\n",
                                                                 "duration": 1.0}], "task_complete": False})


class Policy(BaseHTTPRequestHandler):
    """A stand-in policy (the model is the one part that cannot be a real one here: a tiny model is always wrong):
    row 0 always the teacher's action, row 1 the teacher's on every other request, rows 2-3 always wrong, row 4
    HTTP 500. Requests per row are counted."""

    requests: Counter = Counter()
    lock = threading.Lock()

    def do_GET(self):
        self._reply({"object": "list", "data": [{"id": "policy", "object": "model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        last = body["messages"][-1]["content"]
        index = next(i for i, row in enumerate(ROWS) if row["responses_create_params"]["input"][-1]["content"] == last)
        with self.lock:
            self.requests[index] += 1
            nth = self.requests[index]
        if index == 4:
            self.send_response(500)
            self.end_headers()
            return
        right = index == 0 or (index == 1 and nth % 2)
        answer = ROWS[index]["expected_answer"] if right else WRONG
        self._reply({"choices": [{"message": {"role": "assistant", "content": answer}}]})

    def _reply(self, payload):
        data_ = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data_)))
        self.end_headers()
        self.wfile.write(data_)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def endpoints():
    assert len({row["responses_create_params"]["input"][-1]["content"] for row in ROWS}) == len(ROWS)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Policy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with local_reward_server("configs/rewards/terminus_judge_string_only.yaml") as reward_url:
            yield f"http://127.0.0.1:{server.server_port}/v1", reward_url
    finally:
        server.shutdown()


def _write_rows(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _profile(tmp_path, endpoints, *flags):
    model_url, reward_url = endpoints
    return data.main(["profile", "--rows", _write_rows(tmp_path / "rows.jsonl", ROWS), "--out",
                      str(tmp_path / "kept.jsonl"), "--model_url", model_url, "--model", "policy", "--reward_url",
                      reward_url, "--k", "4", "--json", *flags])


def test_the_filter_keeps_rows_whose_rewards_vary_and_a_rerun_samples_only_what_is_not_done(tmp_path, endpoints,
                                                                                              capsys):
    Policy.requests.clear()
    assert _profile(tmp_path, endpoints) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 5 and report["profiled"] == 5 and report["reused"] == 0 and report["samples"] == 20
    # row 0: always right (too easy), rows 2-3: always wrong (no variance: no GRPO signal); row 4: every call failed
    assert report["kept"] == 1 and report["dropped"] == {"too_easy": 1, "no_variance": 2, "infrastructure": 1}
    assert report["failed"] == {"model": 4} and report["scored"] == 16
    kept = [json.loads(line) for line in (tmp_path / "kept.jsonl").read_text().splitlines()]
    assert [row["uuid"] for row in kept] == [ROWS[1]["uuid"]]
    profile = kept[0]["metadata"]["profile"]
    assert profile["k"] == 4 and profile["scored"] == 4 and sorted(profile["rewards"]) == [0.0, 0.0, 1.0, 1.0]
    assert profile["mean"] == 0.5 and profile["std"] == 0.5 and profile["model"] == "policy"
    assert kept[0]["metadata"]["task"] == ROWS[1]["metadata"]["task"]  # the row's own metadata is kept
    # the failed calls are not zeros: row 4's mean would be 0 if they were
    assert report["mean_of_means"] == pytest.approx((1 + 0.5 + 0 + 0) / 4)

    # a rerun with another filter samples nothing it has (row 4, failed, is sampled again)
    before = Counter(Policy.requests)
    assert _profile(tmp_path, endpoints, "--keep", "hard") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reused"] == 4 and report["profiled"] == 1 and Policy.requests - before == Counter({4: 4})
    assert report["kept"] == 3 and report["dropped"] == {"too_easy": 1, "infrastructure": 1}
    # the difficulty bar: row 1's mean 0.5 is not below 0.5
    assert _profile(tmp_path, endpoints, "--max_mean", "0.5") == 0
    assert json.loads(capsys.readouterr().out)["dropped"]["too_easy"] == 2
    # another K is another setting: nothing reused
    assert _profile(tmp_path, endpoints, "--k", "2") == 0
    assert json.loads(capsys.readouterr().out)["reused"] == 0


def test_a_torn_progress_line_and_a_row_without_uuid(tmp_path, endpoints, capsys):
    rows = [dict(ROWS[1]), dict(ROWS[2])]
    rows[0].pop("uuid")
    assert profiling.row_key(rows[0]) != profiling.row_key(rows[1]) and len(profiling.row_key(rows[0])) == 24
    model_url, reward_url = endpoints
    argv = ["profile", "--rows", _write_rows(tmp_path / "rows.jsonl", rows), "--out", str(tmp_path / "o.jsonl"),
            "--model_url", model_url, "--model", "policy", "--reward_url", reward_url, "--k", "2", "--keep", "all",
            "--json"]
    assert data.main(argv) == 0
    capsys.readouterr()
    progress = tmp_path / "o.progress.jsonl"
    progress.write_text(progress.read_text() + '{"key": "torn')  # a run killed mid-write
    assert data.main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reused"] == 2 and report["samples"] == 0 and report["kept"] == 2


def test_bad_input_is_one_line(tmp_path, endpoints, capsys):
    model_url, reward_url = endpoints
    rows = _write_rows(tmp_path / "rows.jsonl", ROWS[:1])
    out = str(tmp_path / "o.jsonl")
    assert data.main(["profile", "--rows", rows, "--out", out, "--model_url", "http://127.0.0.1:9/v1", "--model",
                      "m"]) == 2
    assert capsys.readouterr().err.startswith("error: --model_url http://127.0.0.1:9/v1: no OpenAI-compatible")
    assert data.main(["profile", "--rows", rows, "--out", out, "--model_url", model_url, "--model", "other",
                      "--reward_url", reward_url]) == 2
    assert capsys.readouterr().err.startswith(f"error: --model other: {model_url} serves policy; pass one")
    assert data.main(["profile", "--rows", rows, "--out", out, "--model_url", model_url, "--model", "policy",
                      "--reward_url", "http://127.0.0.1:9"]) == 2
    assert capsys.readouterr().err.startswith("error: --reward_url http://127.0.0.1:9: the reward server")
    assert data.main(["profile", "--rows", rows, "--out", out, "--model_url", model_url, "--model", "policy",
                      "--checkpoint", "x"]) == 2
    assert "not both" in capsys.readouterr().err
    (tmp_path / "bad.jsonl").write_text('{"responses_create_params": {}}\n')
    assert data.main(["profile", "--rows", str(tmp_path / "bad.jsonl"), "--out", out, "--model_url", model_url,
                      "--model", "policy", "--reward_url", reward_url]) == 2
    assert f"{tmp_path / 'bad.jsonl'}:1: not a decision point" in capsys.readouterr().err
    assert data.main(["profile", "--rows", rows, "--out", out, "--model_url", model_url, "--model", "policy",
                      "--reward_url", reward_url, "--k", "1"]) == 2
    assert "--k 1: at least 2" in capsys.readouterr().err


def test_profile_end_to_end_on_a_served_checkpoint(tmp_path, capsys):
    """--checkpoint: the CPU server and a local reward server started for the run; the embedded model's samples are
    scored (not failed) and every row carries its profile."""
    rows = _write_rows(tmp_path / "rows.jsonl", ROWS[:2])
    argv = ["profile", "--rows", rows, "--out", str(tmp_path / "o.jsonl"), "--checkpoint", "builtin:tiny-qwen3",
            "--k", "2", "--keep", "all", "--max_tokens", "16"]
    assert data.main(argv) == 0
    out = capsys.readouterr().out
    assert "profile: 2 rows (2 sampled now, 0 from an earlier run)" in out and "infrastructure failures 0" in out
    kept = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert [row["metadata"]["profile"]["scored"] for row in kept] == [2, 2]
    assert kept[0]["metadata"]["profile"]["model"] == kept[1]["metadata"]["profile"]["model"]
