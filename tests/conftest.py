import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ACCELERATE = str(Path(sys.executable).parent / "accelerate")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    from trainers.tiny_model import resolve_model

    return resolve_model("builtin:tiny-qwen3")


@pytest.fixture(scope="session")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def chat_row(i: int, n_turns: int = 2, group: str | None = None) -> dict:
    """A small valid tool-calling chat."""
    messages = [{"role": "system", "content": "You are a terminal agent."},
                {"role": "user", "content": f"Task {i}: find the failing unit in /srv/app{i}."}]
    for t in range(n_turns):
        call = f"call_{i}_{t}"
        messages.append({"role": "assistant", "content": f"Step {t}: inspect.", "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"ls /srv/app{i}/{t}"})}}]})
        messages.append({"role": "tool", "tool_call_id": call, "name": "bash", "content": f"unit{t}.service\nlog{t}.txt"})
    messages.append({"role": "assistant", "content": f"The failing unit of app{i} is unit0."})
    return {"messages": messages, "metadata": {"source_trajectory_uid": group or f"traj-{i}"}}


def run(cmd, env=None, timeout=900, **kwargs) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, DS_ACCELERATOR="cpu", **(env or {}))
    return subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout, **kwargs)


def sft_command(*args, accelerate_config="configs/accelerate/cpu.yaml") -> list[str]:
    return [ACCELERATE, "launch", "--config_file", accelerate_config, "--num_cpu_threads_per_process", "1",
            "recipes/sft.py", *args]


class FlakyServer:
    """A minimal HTTP/1.1 server on a background event loop; each request takes the next scripted behaviour
    (the last one repeats): ok, masked, drop, 503, stall, 422, judge_yes (an OpenAI chat completion saying
    [[YES]], for a fake judge). With no script, the completion's text is the
    behaviour, so concurrent requests get theirs whatever their arrival order."""

    def __init__(self, script, reward=1.0):
        self.script, self.reward, self.requests, self.bodies = list(script or []), reward, 0, []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self.handle, "127.0.0.1", 0), self.loop).result()
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                body = json.loads(await reader.readexactly(length))
                if self.script:
                    behaviour = self.script[min(self.requests, len(self.script) - 1)]
                else:
                    behaviour = [i for i in body["response"]["output"] if i["type"] == "message"][0]["content"][0]["text"]
                self.requests += 1
                self.bodies.append(body)
                if behaviour == "drop":
                    writer.close()
                    return
                if behaviour == "stall":
                    await asyncio.sleep(5)
                    writer.close()
                    return
                status, payload = {
                    "ok": (200, {"reward": self.reward, "failure_reason": "none", "similarity_score": 0.5}),
                    "masked": (200, {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"}),
                    "503": (503, {"detail": "overloaded"}),
                    "422": (422, {"detail": "response: field required"}),
                    "judge_yes": (200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "judge",
                                        "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                            "role": "assistant", "content": "The criterion is met.\n[[YES]]"}}],
                                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
                }[behaviour]
                data = json.dumps(payload).encode()
                writer.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (status, len(data), data))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def stop(self):
        async def shutdown():
            self.server.close()
            handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
