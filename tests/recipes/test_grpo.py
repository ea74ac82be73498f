"""The GRPO recipe as users launch it, against reward servers on loopback."""

import json
import socket
import subprocess
import sys

import httpx
import pytest
from conftest import ACCELERATE, REPO, run
from servers import FakeJudge, FlakyServer, ServerThread

pytestmark = pytest.mark.slow

FAST = ["--max_steps", "2", "--save_steps", "2", "--report_to", "none", "--max_completion_length", "16"]


def grpo_command(*args, accelerate_config="configs/accelerate/cpu.yaml"):
    return [ACCELERATE, "launch", "--config_file", accelerate_config, "--num_cpu_threads_per_process", "1",
            "recipes/grpo.py", *args]


def assert_ok(result):
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"


def port_is_closed(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as sock:
        return sock.connect_ex((host, int(port))) != 0


def start_reward_server(*args):
    from common.net import free_port, wait_until_healthy

    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "rewards.server", "--host", "127.0.0.1", "--port", str(port),
                                *args], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_until_healthy(url, process, timeout=60)
    return process, url


@pytest.fixture
def reward_server():
    process, url = start_reward_server()
    yield url
    process.terminate()
    process.wait(timeout=10)


def test_embedded_default_starts_and_stops_its_own_reward_server(tmp_path):
    out = tmp_path / "out"
    with_wandb = [arg for arg in FAST if arg not in ("--report_to", "none")]  # the default: W&B offline
    result = run(grpo_command("--output_dir", str(out), *with_wandb), env={"WANDB_DIR": str(tmp_path)})
    assert_ok(result)
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and (out / "checkpoint-2").is_dir()
    assert summary["verify_requests"] == {"ok": 8}  # 2 steps x 4 completions, all scored by the local server
    assert summary["too_long_filtered"] == 4 and summary["sources"][0]["too_long"] == 4  # over max_prompt_length
    assert summary["train_prompts"] == 52 and summary["invalid_skipped"] == 0
    [url] = summary["reward_urls"]
    assert url.startswith("http://127.0.0.1:") and port_is_closed(url)  # stopped after the run
    assert "GRPO run summary" in result.stdout
    tables = list((tmp_path / "wandb").glob("offline-run-*/files/media/table/completions_*.table.json"))
    assert tables, "no W&B completions table"
    columns = json.loads(tables[0].read_text())["columns"]
    assert {"prompt", "completion", "nemo_gym_verify", "verify_status", "failure", "advantage"} <= set(columns)


def test_two_ranks_under_zero2_against_a_live_server(tmp_path, reward_server):
    out = tmp_path / "out"
    result = run(grpo_command("--output_dir", str(out), "--reward_url", reward_server, *FAST,
                              accelerate_config="configs/accelerate/cpu_zero2.yaml"))
    assert_ok(result)
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["reward_urls"] == [reward_server]
    metrics = httpx.get(f"{reward_server}/metrics").json()
    assert metrics["requests"]["/verify"] == 16  # 2 steps x 2 prompts x 4 completions, over both ranks
    assert metrics["rewards"]["terminus_judge"]["count"] == 16 and metrics["failures"] == {}
    assert summary["verify_requests"]["ok"] == 8  # this process's half


def test_masked_and_failed_samples_are_excluded_and_counted(tmp_path):
    server = FlakyServer(["ok", "masked", "503", "ok"])
    try:
        out = tmp_path / "out"
        result = run(grpo_command("--output_dir", str(out), "--reward_url", server.url, "--reward_retries", "0",
                                  *FAST))
        assert_ok(result)
        counts = json.loads((out / "run_summary.json").read_text())["verify_requests"]
        assert counts == {"ok": 6, "masked/judge_failed": 1, "failed/unreachable": 1}
    finally:
        server.stop()


def test_run_stops_after_consecutive_failures_naming_the_url(tmp_path):
    from common.net import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    result = run([sys.executable, "recipes/grpo.py", "--output_dir", str(tmp_path / "out"), "--reward_url", dead,
                  "--reward_retries", "0", "--reward_max_consecutive_failures", "3", *FAST])
    assert result.returncode == 2
    assert "error: reward server failed 3 times in a row" in result.stderr and "Traceback" not in result.stderr
    assert f"{dead}/verify: ConnectError" in result.stderr


def test_multichallenge_and_verifif_rows_scored_through_a_judge(tmp_path):
    """Both NeMo Gym multi-turn formats through the same loaders, judged by an OpenAI-compatible fake judge."""
    judge = FakeJudge(default="The criterion is met.\n[[YES]]")
    with ServerThread(judge.app) as judge_url:
        process, url = start_reward_server("--judge_base_url", f"{judge_url}/v1", "--judge_model", "fake-judge")
        try:
            out = tmp_path / "out"
            result = run(grpo_command("--output_dir", str(out), "--reward_url", url, "--datasets",
                                      "data/grpo/multichallenge.jsonl,data/grpo/verifif.jsonl", "--max_prompt_length",
                                      "4096", *FAST))
            assert_ok(result)
            summary = json.loads((out / "run_summary.json").read_text())
            environments = {k for source in summary["sources"] for k in source["environments"]}
            assert environments == {"multichallenge_simple_agent", "turing_vif_simple_agent"}
            assert summary["verify_requests"] == {"ok": 8}
            assert len(judge.requests) >= 8  # one judge call per rubric or llm_judge item
            judged = judge.requests[0]
            assert judged["model"] == "fake-judge" and judged["messages"][-1]["role"] == "user"
        finally:
            process.terminate()
            process.wait(timeout=10)
