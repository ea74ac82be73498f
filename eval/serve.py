"""Serve a checkpoint behind an OpenAI-compatible URL for the length of an eval.

Two backends, one contract (`GET /health`, `GET /v1/models`, `POST /v1/chat/completions`):

- `vllm`: `vllm serve CHECKPOINT --served-model-name NAME --max-model-len L ...`, chosen automatically where
  a GPU and vLLM are present;
- `cpu`: a small built-in server (FastAPI + transformers `generate`), the default elsewhere (CI, laptops,
  the embedded tiny model). Requests are served one at a time; `stream=true` is refused (400); a prompt plus
  `max_tokens` beyond the context answers 400 with vLLM's wording, so LiteLLM/Terminus-2 recognise it as a
  context-length error.

`serve_checkpoint(...)` starts either one as a subprocess on a free loopback port, waits for `/health`, yields
a `ServedModel(base_url=".../v1", model=NAME, process=...)` and stops the server when the block exits.
Harbor's Terminus-2 reaches it as `-m hosted_vllm/NAME --ak api_base=BASE_URL` (see
`../shared/reference/terminal_bench.md` §2.10).

    python -m eval.serve --checkpoint outputs/sft-tiny/checkpoint-20 --port 8000
    python -m eval.serve --checkpoint builtin:tiny-qwen3 --backend cpu --max_model_len 4096
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request  # module level: FastAPI resolves the (postponed) annotation from module globals

BACKENDS = ("auto", "cpu", "vllm")
MODEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # Harbor's hosted_vllm/<name> rule
DEFAULT_MAX_NEW_TOKENS_CAP = 1024
STARTUP_TIMEOUT = {"cpu": 180.0, "vllm": 1200.0}


# ----------------------------------------------------------------------------------------------- names

def sanitize_model_name(name: str) -> str:
    """A served model name Harbor accepts as `hosted_vllm/<name>`: `^[A-Za-z0-9._-]{1,64}$`."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    clean = clean[:64].rstrip("-.")
    return clean or "model"


def default_served_name(checkpoint: str) -> str:
    """The checkpoint dir's name (`checkpoint-20`), or the built-in model's name (`tiny-qwen3`)."""
    if checkpoint.startswith("builtin:"):
        return sanitize_model_name(checkpoint.split(":", 1)[1])
    return sanitize_model_name(Path(checkpoint.rstrip("/")).name or checkpoint)


def resolve_checkpoint(checkpoint: str) -> str:
    from trainers.tiny_model import resolve_model

    return resolve_model(checkpoint)


# --------------------------------------------------------------------------------------------- backends

def vllm_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available()) and importlib.util.find_spec("vllm") is not None
    except Exception:  # a broken CUDA install: fall back to the CPU server
        return False


def choose_backend(backend: str = "auto") -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "vllm" if vllm_available() else "cpu"
    return backend


def auto_tensor_parallel(checkpoint: str, n_gpus: int | None = None) -> int:
    """Tensor parallel over the visible GPUs: the largest count <= n_gpus that divides the attention heads."""
    if n_gpus is None:
        import torch

        n_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 1
    heads = None
    config = Path(checkpoint) / "config.json"
    if config.is_file():
        data = json.loads(config.read_text())
        heads = data.get("num_attention_heads") or data.get("text_config", {}).get("num_attention_heads")
    best = 1
    for size in range(1, max(1, n_gpus) + 1):
        if heads is None or heads % size == 0:
            best = size
    return best


def vllm_command(checkpoint: str, served_model_name: str, port: int, host: str = "127.0.0.1",
                 max_model_len: int | None = None, tensor_parallel_size: int | None = None,
                 extra_args: Sequence[str] = ()) -> list[str]:
    """The `vllm serve` command line for a (resolved) checkpoint directory or Hugging Face name.

    A PEFT adapter directory (adapter_config.json, no config.json) is served as LoRA on its base model, under
    the served name. No tool-call or reasoning parser is added: Terminus-2 parses JSON/XML from `content`;
    pass `--reasoning-parser ...` in extra_args for thinking models. tensor_parallel_size None: every visible GPU
    the head count allows (auto_tensor_parallel)."""
    exe = Path(sys.executable).parent / "vllm"
    command = [str(exe) if exe.exists() else "vllm", "serve"]
    adapter = Path(checkpoint) / "adapter_config.json"
    if adapter.is_file() and not (Path(checkpoint) / "config.json").is_file():
        config = json.loads(adapter.read_text())
        base = resolve_checkpoint(config["base_model_name_or_path"])
        command += [base, "--enable-lora", "--lora-modules", f"{served_model_name}={checkpoint}",
                    "--max-lora-rank", str(max(8, int(config.get("r", 8))))]
    else:
        command += [checkpoint, "--served-model-name", served_model_name]
    if tensor_parallel_size is None:
        tensor_parallel_size = auto_tensor_parallel(command[2])
    command += ["--host", host, "--port", str(port), "--tensor-parallel-size", str(tensor_parallel_size),
                "--generation-config", "auto"]
    if max_model_len:
        command += ["--max-model-len", str(max_model_len)]
    return command + list(extra_args)


def cpu_command(checkpoint: str, served_model_name: str, port: int, host: str = "127.0.0.1",
                max_model_len: int | None = None, max_new_tokens_cap: int | None = None) -> list[str]:
    command = [sys.executable, "-m", "eval.serve", "--backend", "cpu", "--checkpoint", checkpoint,
               "--host", host, "--port", str(port), "--served_model_name", served_model_name]
    if max_model_len:
        command += ["--max_model_len", str(max_model_len)]
    if max_new_tokens_cap:
        command += ["--max_new_tokens_cap", str(max_new_tokens_cap)]
    return command


# ------------------------------------------------------------------------------------------ CPU server

class RequestError(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None):
        super().__init__(message)
        self.message, self.status, self.param = message, status, param


def _error_body(message: str, status: int, param: str | None = None) -> dict:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def _message_text(content: Any) -> Any:
    """OpenAI content parts ([{type: text, text}]) flattened to a string; strings and None pass through."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content


def _int_field(body: dict, key: str, minimum: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RequestError(f"{key} must be an integer >= {minimum}, got {value!r}", param=key)
    return value


def _float_field(body: dict, key: str, default: float, low: float, high: float, low_open: bool = False) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value > high or value < low \
            or (low_open and value == low):
        bound = f"{'(' if low_open else '['}{low}, {high}]"
        raise RequestError(f"{key} must be a number in {bound}, got {value!r}", param=key)
    return float(value)


class Generator:
    """A checkpoint loaded with transformers, and the OpenAI chat-completion logic around `generate`."""

    def __init__(self, checkpoint: str, served_model_name: str, max_model_len: int | None = None,
                 max_new_tokens_cap: int = DEFAULT_MAX_NEW_TOKENS_CAP, device: str | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        path = resolve_checkpoint(checkpoint)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.float32 if self.device == "cpu" else "auto"
        adapter = Path(path) / "adapter_config.json"
        if adapter.is_file() and not (Path(path) / "config.json").is_file():
            from peft import PeftModel

            base = resolve_checkpoint(json.loads(adapter.read_text())["base_model_name_or_path"])
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=dtype), path)
            model = model.merge_and_unload()
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        self.model = model.to(self.device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if not self.tokenizer.chat_template:
            raise RuntimeError(f"{path}: the tokenizer has no chat template; a chat checkpoint is needed")
        self.served_model_name = served_model_name
        limit = getattr(self.model.config, "max_position_embeddings", None) or 2048
        self.max_model_len = min(limit, max_model_len) if max_model_len else limit
        self.max_new_tokens_cap = max_new_tokens_cap
        self.created = int(time.time())
        # Sampling defaults from the checkpoint's generation_config.json when it sets them (vLLM's
        # `--generation-config auto`), else OpenAI's (temperature 1, top_p 1, no top-k).
        gen_file = Path(path) / "generation_config.json"
        gen = json.loads(gen_file.read_text()) if gen_file.is_file() else {}
        self.defaults = {"temperature": 1.0 if gen.get("temperature") is None else float(gen["temperature"]),
                         "top_p": 1.0 if gen.get("top_p") is None else float(gen["top_p"]),
                         "top_k": gen.get("top_k")}
        eos = self.model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos] if eos is not None else []
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in eos:
            eos.append(self.tokenizer.eos_token_id)
        self.eos_ids = eos
        pad = self.model.generation_config.pad_token_id
        self.pad_id = pad if pad is not None else self.tokenizer.pad_token_id if self.tokenizer.pad_token_id \
            is not None else (eos[0] if eos else 0)

    def models(self) -> dict:
        return {"object": "list", "data": [{
            "id": self.served_model_name, "object": "model", "created": self.created, "owned_by": "terminal-recipes",
            "root": self.served_model_name, "parent": None, "max_model_len": self.max_model_len}]}

    def prepare(self, body: dict) -> dict:
        """Validate a request and tokenize its prompt; RequestError for anything vLLM would answer 4xx."""
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.served_model_name:
            raise RequestError(f"The model `{model}` does not exist.", status=404, param="model")
        if body.get("stream"):
            raise RequestError("stream=true is not supported by the built-in CPU server; send stream=false "
                               "(or serve the checkpoint with vLLM)", param="stream")
        n = body.get("n", 1)
        if n != 1:
            raise RequestError(f"n must be 1 on the built-in CPU server, got {n!r}", param="n")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and "role" in m
                                                                     for m in messages):
            raise RequestError("messages must be a non-empty list of {role, content} objects", param="messages")
        messages = [{**m, "content": _message_text(m.get("content"))} for m in messages]
        template_kwargs = {}
        chat_kwargs = body.get("chat_template_kwargs") or {}
        if isinstance(chat_kwargs, dict) and "enable_thinking" in chat_kwargs:
            template_kwargs["enable_thinking"] = bool(chat_kwargs["enable_thinking"])
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                      **template_kwargs)
        except Exception as exc:  # jinja errors: a conversation the template refuses
            raise RequestError(f"the chat template could not render these messages: {exc}", param="messages")
        prompt_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]

        max_tokens = _int_field(body, "max_completion_tokens", 1)
        if max_tokens is None:
            max_tokens = _int_field(body, "max_tokens", 1)
        n_prompt = len(prompt_ids)
        if max_tokens is not None and n_prompt + max_tokens > self.max_model_len:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion). "
                f"Please reduce the length of the messages or completion.", param="messages")
        if n_prompt >= self.max_model_len:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, your request has "
                f"{n_prompt} input tokens. Please reduce the length of the input messages.", param="messages")
        if max_tokens is None:
            max_tokens = self.max_model_len - n_prompt
        stop = body.get("stop")
        if isinstance(stop, str):
            stop = [stop]
        if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
            raise RequestError("stop must be a string or a list of strings", param="stop")
        stop_token_ids = body.get("stop_token_ids") or []
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise RequestError(f"seed must be an integer, got {seed!r}", param="seed")
        top_k = body.get("top_k", self.defaults["top_k"])
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)):
            raise RequestError(f"top_k must be an integer, got {top_k!r}", param="top_k")
        return {
            "prompt_ids": prompt_ids,
            "max_new_tokens": min(max_tokens, self.max_new_tokens_cap),
            "temperature": _float_field(body, "temperature", self.defaults["temperature"], 0.0, 2.0),
            "top_p": _float_field(body, "top_p", self.defaults["top_p"], 0.0, 1.0, low_open=True),
            "top_k": top_k if top_k and top_k > 0 else None,
            "stop": [s for s in stop or [] if s],
            "stop_token_ids": [int(t) for t in stop_token_ids],
            "seed": seed,
        }

    def generate(self, req: dict) -> dict:
        torch = self.torch
        from transformers import GenerationConfig

        if req["seed"] is not None:
            torch.manual_seed(req["seed"])
        sample = req["temperature"] > 0
        config = GenerationConfig(max_new_tokens=req["max_new_tokens"], do_sample=sample,
                                  eos_token_id=self.eos_ids + req["stop_token_ids"], pad_token_id=self.pad_id)
        if sample:
            config.temperature, config.top_p = req["temperature"], req["top_p"]
            if req["top_k"]:
                config.top_k = req["top_k"]
        extra = {"stop_strings": req["stop"], "tokenizer": self.tokenizer} if req["stop"] else {}
        inputs = torch.tensor([req["prompt_ids"]], device=self.device)
        with torch.inference_mode():
            output = self.model.generate(inputs, attention_mask=torch.ones_like(inputs), generation_config=config,
                                         **extra)
        new = output[0, inputs.shape[1]:].tolist()
        stop_ids = set(config.eos_token_id)
        finish = "length"
        if new and new[-1] in stop_ids:
            finish = "stop"
        text_ids = new[:-1] if finish == "stop" else new
        text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
        hits = [i for i in (text.find(s) for s in req["stop"]) if i >= 0]
        if hits:
            text, finish = text[:min(hits)], "stop"
        n_prompt = len(req["prompt_ids"])
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": self.served_model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(new),
                      "total_tokens": n_prompt + len(new)},
        }


def create_app(generator: Generator):
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI(title="terminal-recipes CPU OpenAI-compatible server")
    lock = asyncio.Lock()

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": generator.served_model_name}

    @app.get("/v1/models")
    async def models():
        return generator.models()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            try:
                body = json.loads(await request.body())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RequestError(f"the request body is not valid JSON: {exc}")
            req = generator.prepare(body)
            async with lock:  # one generation at a time: the CPU is the bottleneck anyway
                result = await asyncio.to_thread(generator.generate, req)
            return result
        except RequestError as exc:
            return JSONResponse(_error_body(exc.message, exc.status, exc.param), status_code=exc.status)
        except Exception as exc:  # a generation failure is the server's fault, not the caller's
            return JSONResponse(_error_body(f"{type(exc).__name__}: {exc}", 500), status_code=500)

    return app


# ------------------------------------------------------------------------------------- serve_checkpoint

@dataclass
class ServedModel:
    base_url: str            # http://127.0.0.1:PORT/v1
    model: str               # the served name: the request's "model", Harbor's hosted_vllm/<model>
    process: subprocess.Popen
    backend: str = "cpu"
    max_model_len: int | None = None
    log_path: str | None = None
    command: list[str] = field(default_factory=list)

    @property
    def harbor_model(self) -> str:
        return f"hosted_vllm/{self.model}"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return Path(self.log_path).read_text(errors="replace")[-chars:] if self.log_path else ""
        except OSError:
            return ""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _stop(process: subprocess.Popen, grace: float = 15.0) -> None:
    """SIGTERM to the server's process group (vLLM has workers), SIGKILL after `grace` seconds."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            (process.terminate if sig == signal.SIGTERM else process.kill)()
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def serve_checkpoint(checkpoint: str, backend: str = "auto", port: int | None = None, host: str = "127.0.0.1",
                     served_model_name: str | None = None, max_model_len: int | None = None,
                     max_new_tokens_cap: int | None = None, tensor_parallel_size: int | None = None,
                     extra_args: Sequence[str] = (), startup_timeout: float | None = None,
                     log_path: str | os.PathLike | None = None, env: dict | None = None) -> Iterator[ServedModel]:
    """Start an OpenAI-compatible server for `checkpoint`, wait for /health, yield a ServedModel, stop it."""
    import httpx

    backend = choose_backend(backend)
    name = sanitize_model_name(served_model_name) if served_model_name else default_served_name(checkpoint)
    port = port or free_port(host)
    if backend == "vllm":
        command = vllm_command(resolve_checkpoint(checkpoint), name, port, host, max_model_len,
                               tensor_parallel_size, extra_args)
        if shutil.which(command[0]) is None:
            raise RuntimeError(f"backend 'vllm': {command[0]} not found; install vllm (pip install -e '.[gpu]') or "
                               f"use backend='cpu'")
    else:
        command = cpu_command(checkpoint, name, port, host, max_model_len, max_new_tokens_cap)
    timeout = startup_timeout if startup_timeout is not None else STARTUP_TIMEOUT[backend]
    temp_log = None
    if log_path is None:
        fd, temp_log = tempfile.mkstemp(prefix=f"serve-{name}-", suffix=".log")
        os.close(fd)
        log_path = temp_log
    repo = str(Path(__file__).resolve().parents[1])
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, full_env.get("PYTHONPATH")) if p)
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=full_env, start_new_session=True)
    url = f"http://{host}:{port}"
    served = ServedModel(f"{url}/v1", name, process, backend, None, str(log_path), command)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the {backend} server for {checkpoint} exited with code {process.returncode} "
                                   f"before answering {url}/health; its log ({log_path}) ends with:\n"
                                   f"{served.log_tail()}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {backend} server for {checkpoint} did not answer {url}/health within "
                                   f"{timeout:.0f} s; its log ({log_path}) ends with:\n{served.log_tail()}")
            time.sleep(0.25)
        try:
            data = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
            served.max_model_len = next((m.get("max_model_len") for m in data if m.get("id") == name), None)
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
        yield served
        keep_log = False
    except BaseException:
        keep_log = True  # a failed start or a failed eval: the error names the log, so it stays
        raise
    finally:
        _stop(process)
        if temp_log and not keep_log:
            Path(temp_log).unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------------- CLI

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m eval.serve",
        description="Serve a checkpoint behind an OpenAI-compatible API (/v1/chat/completions, /v1/models, "
                    "/health): vLLM where a GPU and vLLM are present, else the built-in CPU server.")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint dir, Hugging Face name, or builtin:tiny-qwen3")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served_model_name", default=None,
                        help="name clients send as `model` (default: the checkpoint dir's name); sanitized to "
                             "^[A-Za-z0-9._-]{1,64}$ as Harbor's hosted_vllm/<name> requires")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="auto: vllm if CUDA and vllm are available, else cpu")
    parser.add_argument("--max_model_len", type=int, default=None,
                        help="context length (prompt + completion); default: the model's max_position_embeddings")
    parser.add_argument("--max_new_tokens_cap", type=int, default=DEFAULT_MAX_NEW_TOKENS_CAP,
                        help="cpu backend: upper bound on generated tokens per request, whatever max_tokens says")
    parser.add_argument("--tensor_parallel_size", type=int, default=None,
                        help="vllm backend (default: every visible GPU that divides the attention heads)")
    parser.add_argument("--log_level", default="warning", help="uvicorn log level (cpu backend)")
    args, extra = parser.parse_known_args(argv)
    if extra and choose_backend(args.backend) != "vllm":
        parser.error(f"unrecognized arguments: {' '.join(extra)} (extra arguments are passed to vllm only)")
    args.vllm_args = extra
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    name = sanitize_model_name(args.served_model_name) if args.served_model_name else \
        default_served_name(args.checkpoint)
    if args.served_model_name and name != args.served_model_name:
        print(f"served model name {args.served_model_name!r} sanitized to {name!r}", file=sys.stderr)
    backend = choose_backend(args.backend)
    if backend == "vllm":
        command = vllm_command(resolve_checkpoint(args.checkpoint), name, args.port, args.host,
                               args.max_model_len, args.tensor_parallel_size, args.vllm_args)
        print(" ".join(command), file=sys.stderr, flush=True)
        if shutil.which(command[0]) is None and not Path(command[0]).exists():
            print(f"error: {command[0]} not found; install vllm or use --backend cpu", file=sys.stderr)
            return 2
        os.execvp(command[0], command)
    import uvicorn

    generator = Generator(args.checkpoint, name, args.max_model_len, args.max_new_tokens_cap)
    print(f"serving {name} ({generator.device}, max_model_len {generator.max_model_len}) at "
          f"http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    uvicorn.run(create_app(generator), host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
