"""eval/serve.py: the built-in CPU OpenAI-compatible server (started through serve_checkpoint on the tiny
model), the vLLM command line, names and backend choice."""

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from common.errors import UserError
from common.model_families import FAMILIES, UnknownFamily
from eval.serve import (MODEL_NAME_PATTERN, auto_tensor_parallel, choose_backend, default_served_name, sanitize_model_name,
                        serve_checkpoint, vllm_command)
from tests.conftest import REPO

MAX_MODEL_LEN = 256
CHAT = [{"role": "system", "content": "You are a terminal agent."},
        {"role": "user", "content": "List the files in /srv/app."},
        {"role": "assistant", "content": "ls /srv/app"},
        {"role": "user", "content": "Now show the failing unit."}]


@pytest.fixture(scope="module")
def served(tiny_model_path):
    with serve_checkpoint("builtin:tiny-qwen3", backend="cpu", max_model_len=MAX_MODEL_LEN, max_new_tokens_cap=48,
                          startup_timeout=120, reasoning=True) as server:
        yield server


def chat(served, **body):
    """A chat request; thinking off unless the body says otherwise (the untrained model never closes a <think>,
    so with thinking on its whole answer is reasoning, as vLLM's qwen3 parser has it)."""
    body = {"model": served.model, "messages": CHAT, "chat_template_kwargs": {"enable_thinking": False}, **body}
    return httpx.post(f"{served.base_url}/chat/completions", json=body, timeout=60)


def test_an_answer_with_thinking_on_is_reasoning_until_it_closes_as_vllm_has_it(served):
    """vLLM's qwen3 reasoning parser: thinking on (the default) and no </think> is an answer cut short while
    reasoning: `reasoning_content`, no content; thinking off, the same kind of answer is all content."""
    on = chat(served, temperature=0, max_tokens=7, chat_template_kwargs={}).json()["choices"][0]["message"]
    assert on["content"] is None and isinstance(on["reasoning_content"], str) and on["reasoning_content"]
    off = chat(served, temperature=0, max_tokens=7).json()["choices"][0]["message"]
    assert isinstance(off["content"], str) and "reasoning_content" not in off


def test_health_and_models(served):
    assert served.base_url.startswith("http://127.0.0.1:") and served.base_url.endswith("/v1")
    assert served.model == "tiny-qwen3" and served.harbor_model == "hosted_vllm/tiny-qwen3"
    assert served.backend == "cpu" and served.max_model_len == MAX_MODEL_LEN
    assert httpx.get(served.base_url.removesuffix("/v1") + "/health", timeout=10).status_code == 200
    models = httpx.get(f"{served.base_url}/models", timeout=10).json()
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["max_model_len"]) for m in models["data"]] == [("tiny-qwen3", "model", 256)]


def test_chat_completion_shape_and_max_tokens(served):
    response = chat(served, temperature=0, max_tokens=7)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["id"].startswith("chatcmpl-") and data["object"] == "chat.completion"
    assert data["model"] == "tiny-qwen3" and isinstance(data["created"], int)
    [choice] = data["choices"]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    usage = data["usage"]
    assert usage["prompt_tokens"] > 0 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["completion_tokens"] <= 7
    # the untrained tiny model never says <|im_end|> within 7 tokens at temperature 0
    assert choice["finish_reason"] == "length" and usage["completion_tokens"] == 7
    # max_completion_tokens wins over max_tokens, as in OpenAI's API
    usage = chat(served, temperature=0, max_tokens=7, max_completion_tokens=3).json()["usage"]
    assert usage["completion_tokens"] == 3


def test_max_new_tokens_cap_bounds_an_open_request(served):
    data = chat(served, temperature=0).json()  # no max_tokens: the rest of the context, capped at 48
    assert data["usage"]["completion_tokens"] <= 48


def test_temperature_zero_is_deterministic_and_seed_reproducible(served):
    first, second = (chat(served, temperature=0, max_tokens=12).json() for _ in range(2))
    assert first["choices"][0]["message"] == second["choices"][0]["message"]
    a, b = (chat(served, temperature=1.0, top_p=0.9, seed=7, max_tokens=24).json() for _ in range(2))
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]


def test_stop_string_truncates(served):
    full = chat(served, temperature=1.0, seed=3, max_tokens=24).json()["choices"][0]["message"]["content"]
    assert len(full) > 6
    stop = full[3:6]
    data = chat(served, temperature=1.0, seed=3, max_tokens=24, stop=[stop]).json()
    choice = data["choices"][0]
    assert choice["message"]["content"] == full[:full.find(stop)]
    assert choice["finish_reason"] == "stop"


def test_extra_body_and_content_parts(served):
    # unknown extra_body keys are ignored; chat_template_kwargs.enable_thinking reaches the template
    # (Qwen3's template adds an empty <think></think> block to the prompt when thinking is off)
    on = chat(served, max_tokens=1, chat_template_kwargs={"enable_thinking": True}, session_id="s1",
              top_k=20, logprobs=False)
    off = chat(served, max_tokens=1, chat_template_kwargs={"enable_thinking": False})
    assert on.status_code == off.status_code == 200, (on.text, off.text)
    assert off.json()["usage"]["prompt_tokens"] > on.json()["usage"]["prompt_tokens"]
    parts = [{"role": "user", "content": [{"type": "text", "text": "List the files "}, {"type": "text", "text": "now."}]}]
    flat = [{"role": "user", "content": "List the files now."}]
    assert chat(served, messages=parts, max_tokens=1).json()["usage"] == chat(served, messages=flat, max_tokens=1).json()["usage"]


@pytest.mark.parametrize("body, status, words", [
    ({"stream": True}, 400, "stream=true is not supported"),
    ({"messages": [{"role": "user", "content": "ls -la /srv/app " * 200}], "max_tokens": 8}, 400,
     "maximum context length is 256 tokens"),
    ({"max_tokens": 250}, 400, "maximum context length is 256 tokens"),
    ({"max_tokens": 0}, 400, "max_tokens must be an integer >= 1"),
    ({"n": 2}, 400, "n must be 1"),
    ({"temperature": -1}, 400, "temperature must be a number"),
    ({"messages": []}, 400, "messages must be a non-empty list"),
    ({"model": "another-model"}, 404, "does not exist"),
])
def test_bad_requests(served, body, status, words):
    response = chat(served, **body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert words in error["message"] and error["code"] == status
    if "context length" in words:  # LiteLLM/Harbor's context-overflow phrase, so Terminus-2 summarizes
        assert "maximum context length" in error["message"].lower()


# ------------------------------------------------------------------------------------- tool calls

TOOL_CHAT = [{"role": "user", "content": "Count the lines of /app/a.txt."},
             {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function", "function": {
                 "name": "bash", "arguments": json.dumps({"command": "wc -l < /app/a.txt"})}}]},
             {"role": "tool", "tool_call_id": "call_0", "content": "12"}]


@pytest.fixture(scope="module")
def tool_served(tiny_model_path):  # the tools' system prompt alone is longer than `served`'s 256-token context
    with serve_checkpoint("builtin:tiny-qwen3", backend="cpu", max_model_len=2048, max_new_tokens_cap=8,
                          startup_timeout=120) as server:
        yield server


def prompt_tokens(tokenizer, messages, **template_kwargs) -> int:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **template_kwargs)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_tools_and_tool_turns_render_as_the_template_renders_a_trained_conversation(tool_served, tokenizer):
    from common.bash_harness import BASH_TOOL

    plain = chat(tool_served, chat_template_kwargs={}, max_tokens=1).json()["usage"]["prompt_tokens"]
    with_tools = chat(tool_served, chat_template_kwargs={}, max_tokens=1,
                      tools=[BASH_TOOL]).json()["usage"]["prompt_tokens"]
    assert with_tools == prompt_tokens(tokenizer, CHAT, tools=[BASH_TOOL]) > plain == prompt_tokens(tokenizer, CHAT)
    # the OpenAI-style JSON-string arguments are read back into the object a trained conversation renders
    as_objects = [{**m, "tool_calls": [{**c, "function": {**c["function"], "arguments": json.loads(
        c["function"]["arguments"])}} for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in TOOL_CHAT]
    rendered = tokenizer.apply_chat_template(as_objects, tools=[BASH_TOOL], tokenize=False, add_generation_prompt=True)
    assert '"arguments": {"command": "wc -l < /app/a.txt"}}' in rendered and "<tool_response>\n12\n" in rendered
    for messages in (TOOL_CHAT, as_objects):
        response = chat(tool_served, chat_template_kwargs={}, messages=messages, tools=[BASH_TOOL], max_tokens=1)
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["prompt_tokens"] == prompt_tokens(tokenizer, as_objects, tools=[BASH_TOOL])


@pytest.mark.parametrize("body, words", [
    ({"tools": "bash"}, "tools must be a list"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "function.name must be"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0] must be"),
    ({"tools": [{"type": "function", "function": {"name": "bash", "parameters": "x"}}]}, "parameters must be"),
    ({"tools": [{"type": "function", "function": {"name": "bash"}}], "tool_choice": "required"}, "tool_choice"),
    ({"messages": [TOOL_CHAT[0], {**TOOL_CHAT[1], "tool_calls": [{"type": "function", "function": {
        "name": "bash", "arguments": "{not json"}}]}]}, "is not valid JSON"),
])
def test_bad_tool_requests(tool_served, body, words):
    response = chat(tool_served, max_tokens=1, **body)
    assert response.status_code == 400, response.text
    assert words in response.json()["error"]["message"]


def test_generated_tool_call_blocks_become_openai_tool_calls():
    from eval.tool_calls import parse_hermes_json as parse_tool_calls  # the qwen3 family's, the CPU server's

    block = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -l \\"a b\\""}}\n</tool_call>'
    content, [call] = parse_tool_calls(block)
    assert content is None and call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "bash", "arguments": '{"command": "ls -l \\"a b\\""}'}
    content, calls = parse_tool_calls("<think>\n\n</think>\n\nLet me look.\n" + block + "\n" + block)
    assert content == "<think>\n\n</think>\n\nLet me look." and len(calls) == 2 and calls[0]["id"] != calls[1]["id"]
    # an unclosed block at the end of the answer still parses (vLLM's hermes parser: cut by max_tokens after the JSON)
    assert parse_tool_calls(block.removesuffix("</tool_call>"))[1][0]["function"]["name"] == "bash"
    # a malformed call stays text, all of it
    for text in ('<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}\n</tool_call>',   # bad JSON
                 '<tool_call>\n{"arguments": {"command": "ls"}}\n</tool_call>',                 # no name
                 '<tool_call>\n{"name": "bash", "arguments": "ls"}\n</tool_call>',              # arguments no object
                 block + '<tool_call>["ls"]</tool_call>', "no call at all"):
        assert parse_tool_calls(text) == (text, [])


def test_openai_client(served):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=served.base_url, api_key="EMPTY")
    assert [m.id for m in client.models.list().data] == ["tiny-qwen3"]
    completion = client.chat.completions.create(model=served.model, messages=CHAT, temperature=0, max_tokens=5,
                                                extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert completion.choices[0].finish_reason == "length" and completion.usage.completion_tokens == 5
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.chat.completions.create(model=served.model, messages=CHAT, max_tokens=10_000)
    with pytest.raises(openai.BadRequestError, match="stream=true"):
        client.chat.completions.create(model=served.model, messages=CHAT, stream=True)


def test_server_is_stopped_when_the_block_exits(tiny_model_path, tmp_path):
    with pytest.raises(KeyError):
        with serve_checkpoint(tiny_model_path, backend="cpu", served_model_name="ckpt/step 100!",
                              log_path=tmp_path / "server.log") as server:
            assert server.model == "ckpt-step-100"
            port = int(server.base_url.rsplit(":", 1)[1].split("/")[0])
            raise KeyError("the eval failed")
    assert server.process.poll() is not None
    assert "serving ckpt-step-100" in (tmp_path / "server.log").read_text()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_a_server_that_dies_reports_its_log(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(RuntimeError, match=r"exited with code \d+ .*\n(.|\n)*not a valid JSON file") as error:
        with serve_checkpoint(str(tmp_path), backend="cpu", startup_timeout=60, model_family="qwen3"):
            pass
    log = Path(re.search(r"its log \((.+?)\)", str(error.value)).group(1))
    assert "Traceback" in log.read_text()  # the log the message names is kept
    log.unlink()


def test_names():
    assert sanitize_model_name("checkpoint-20") == "checkpoint-20"
    assert sanitize_model_name("org/model name:v1") == "org-model-name-v1"
    assert sanitize_model_name("///") == "model"
    long = sanitize_model_name("x" * 100)
    assert len(long) == 64 and MODEL_NAME_PATTERN.match(long)
    assert default_served_name("builtin:tiny-qwen3") == "tiny-qwen3"
    assert default_served_name("outputs/sft-tiny/checkpoint-20/") == "checkpoint-20"


def test_backend_choice(monkeypatch):
    import eval.serve as serve

    monkeypatch.setattr(serve, "vllm_available", lambda: False)
    assert choose_backend("auto") == "cpu"
    monkeypatch.setattr(serve, "vllm_available", lambda: True)
    assert choose_backend("auto") == "vllm" and choose_backend("cpu") == "cpu"
    with pytest.raises(ValueError, match="backend must be one of"):
        choose_backend("tgi")


def test_vllm_command(tmp_path):
    command = vllm_command("/ckpt/step_100", "ckpt-step100", 8123, max_model_len=65536, tensor_parallel_size=2,
                           model_family="qwen3")
    assert command[0].endswith("vllm") and command[1:3] == ["serve", "/ckpt/step_100"]
    # tool calls parsed as vLLM parses the family's, so the bash-tool agent gets OpenAI tool_calls on GPU too
    assert "--enable-auto-tool-choice" in command
    rest = [arg for arg in command[3:] if arg != "--enable-auto-tool-choice"]
    args = dict(zip(rest[::2], rest[1::2]))
    assert args == {"--served-model-name": "ckpt-step100", "--host": "127.0.0.1", "--port": "8123",
                    "--tensor-parallel-size": "2", "--generation-config": "auto", "--max-model-len": "65536",
                    "--tool-call-parser": "hermes"}
    # the reasoning parser is opt-in: a checkpoint trained without think blocks would answer with no content
    assert parsers(vllm_command("/ckpt", "c", 1, tensor_parallel_size=1, model_family="qwen3", reasoning=True))[
        "--reasoning-parser"] == ["qwen3"]
    assert "--max-model-len" not in vllm_command("/ckpt", "c", 1, tensor_parallel_size=1, model_family="qwen3")
    # a LoRA adapter is served on its base model under the served name
    (tmp_path / "adapter_config.json").write_text('{"base_model_name_or_path": "Qwen/Qwen3-8B", "r": 64}')
    command = vllm_command(str(tmp_path), "lora-ckpt", 8000, model_family="qwen3")
    assert command[2] == "Qwen/Qwen3-8B"
    assert command[command.index("--lora-modules") + 1] == f"lora-ckpt={tmp_path}"
    assert command[command.index("--max-lora-rank") + 1] == "64"


def parsers(command: list[str]) -> dict:
    return {flag: [command[i + 1] for i, arg in enumerate(command) if arg == flag]
            for flag in ("--tool-call-parser", "--reasoning-parser")}


@pytest.mark.parametrize("key", list(FAMILIES))
def test_vllm_gets_the_parsers_the_family_table_names_and_no_other(key):
    family = FAMILIES[key]
    command = vllm_command("/ckpt", "c", 1, tensor_parallel_size=1, model_family=key, reasoning=True)
    assert parsers(command) == {"--tool-call-parser": [family.vllm_tool_call_parser],
                                "--reasoning-parser": [family.vllm_reasoning_parser] if family.vllm_reasoning_parser
                                else []}
    assert parsers(vllm_command("/ckpt", "c", 1, tensor_parallel_size=1, model_family=key))["--reasoning-parser"] == []
    if family.vllm_reasoning_parser:  # the family's own reasoning parser among the extra arguments opts in
        opted = vllm_command("/ckpt", "c", 1, tensor_parallel_size=1, model_family=key,
                             extra_args=[f"--reasoning-parser={family.vllm_reasoning_parser}"])
        assert opted[-1] == f"--reasoning-parser={family.vllm_reasoning_parser}" and parsers(opted)[
            "--reasoning-parser"] == []
    assert command.count("--enable-auto-tool-choice") == 1
    # the family's own parser given again is taken once; any other is refused, naming the family key
    own = ["--tool-call-parser", family.vllm_tool_call_parser, "--max-num-seqs", "8"]
    command = vllm_command("/ckpt", "c", 1, tensor_parallel_size=1, model_family=key, extra_args=own)
    assert parsers(command)["--tool-call-parser"] == [family.vllm_tool_call_parser]
    assert command[-2:] == ["--max-num-seqs", "8"]
    for other in ("--tool-call-parser=pythonic", "--reasoning-parser=deepseek_r1"):
        with pytest.raises(UserError, match=f"the {key} family is served with .*--model_family") as error:
            vllm_command("/ckpt", "c", 1, tensor_parallel_size=1, model_family=key, extra_args=[other])
        assert "\n" not in str(error.value)


def test_qwen3_5_is_served_with_qwen3_coder_never_hermes(tmp_path):
    """The flagship config's family, told from the checkpoint's own files (TRL's Qwen3.5 template)."""
    from common.model_families import trl_template_dir

    (tmp_path / "chat_template.jinja").write_text((trl_template_dir() / "qwen3_5_think.jinja").read_text())
    (tmp_path / "config.json").write_text('{"model_type": "qwen3_5", "num_attention_heads": 24}')
    command = vllm_command(str(tmp_path), "c", 1, tensor_parallel_size=1)
    assert parsers(command) == {"--tool-call-parser": ["qwen3_coder"], "--reasoning-parser": []}
    assert "hermes" not in command
    with pytest.raises(UserError, match="--tool-call-parser hermes: the qwen3_5 family is served with qwen3_coder"):
        vllm_command(str(tmp_path), "c", 1, tensor_parallel_size=1, extra_args=["--tool-call-parser", "hermes"])
    # naming the family outright is how a user picks another family's parsers
    assert parsers(vllm_command(str(tmp_path), "c", 1, tensor_parallel_size=1, model_family="qwen3"))[
        "--tool-call-parser"] == ["hermes"]


def test_a_model_of_unknown_family_is_refused_before_anything_starts(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}")
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    for start in (lambda: vllm_command(str(tmp_path), "c", 1, tensor_parallel_size=1),
                  lambda: serve_checkpoint(str(tmp_path), backend="cpu").__enter__(),
                  lambda: serve_checkpoint("Org/not-downloaded", backend="vllm").__enter__()):
        with pytest.raises(UnknownFamily) as error:
            start()
        message = str(error.value)
        assert "\n" not in message and "`model_family`" in message and all(key in message for key in FAMILIES)
    result = subprocess.run([sys.executable, "-m", "eval.serve", "--checkpoint", str(tmp_path), "--backend", "cpu"],
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.startswith("error: cannot tell the model family")
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_help():
    result = subprocess.run([sys.executable, "-m", "eval.serve", "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0
    for flag in ("--checkpoint", "--host", "--port", "--served_model_name", "--backend", "--max_model_len",
                 "--max_new_tokens_cap", "--model_family"):
        assert flag in result.stdout
    assert all(key in result.stdout for key in FAMILIES)


def test_auto_tensor_parallel(tmp_path):
    (tmp_path / "config.json").write_text('{"num_attention_heads": 12}')
    assert [auto_tensor_parallel(str(tmp_path), n) for n in (1, 2, 4, 8)] == [1, 2, 4, 6]
    assert auto_tensor_parallel("/no/such/ckpt", 4) == 4
    command = vllm_command(str(tmp_path), "c", 1, model_family="qwen3")  # default: the visible GPUs (none here: 1)
    assert command[command.index("--tensor-parallel-size") + 1] == str(auto_tensor_parallel(str(tmp_path)))
