"""Serve a checkpoint behind an OpenAI-compatible URL for the length of an eval: `serve_checkpoint`, the backends.
Runs in: the training venv; the server is a subprocess (vLLM's, or eval/cpu_server.py) on a free loopback port.

Backends `vllm` (`vllm serve ... --enable-auto-tool-choice --tool-call-parser P [--reasoning-parser R]`, P and R
from the model's family in common/model_families.py, where a GPU and vLLM are present) and `cpu`
(eval/cpu_server.py, elsewhere). A model whose family cannot be told is refused before anything starts (one line:
set `--model_family`). `serve_checkpoint(...)` waits for `/health`, yields a
`ServedModel(base_url=".../v1", model=NAME, process=...)` and stops the server when the block exits.

    python -m eval.serve --checkpoint outputs/sft-tiny/checkpoint-20 --port 8000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import UserError
from common.model_families import (FAMILIES, FAMILY_KEY, ModelFamily, UnknownFamily, family, family_of,
                                   family_of_checkpoint, known_keys)
from common.net import free_port, stop_process, wait_until_healthy
from eval import cpu_server
from eval.cpu_server import DEFAULT_MAX_NEW_TOKENS_CAP
from modeling.tiny_model import resolve_model

BACKENDS = ("auto", "cpu", "vllm")
MODEL_NAME_PATTERN = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # Harbor's hosted_vllm/<name> rule
STARTUP_TIMEOUT = {"cpu": 180.0, "vllm": 1200.0}


# ----------------------------------------------------------------------------------------------- names

def sanitize_model_name(name: str) -> str:
    """A served model name Harbor accepts as `hosted_vllm/<name>`: `^[A-Za-z0-9._-]{1,64}$`."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    clean = clean[:64].rstrip("-.")
    return clean or "model"


def eval_served_name(checkpoint: str) -> str:
    """The name an eval serves a checkpoint under, distinct per run and step (`<run dir>-<checkpoint dir>`): Harbor
    keys its results by model name."""
    folder = Path(checkpoint)
    return "-".join(part for part in (folder.resolve().parent.name, folder.name) if part)


def default_served_name(checkpoint: str) -> str:
    """The checkpoint dir's name (`checkpoint-20`), or the built-in model's name (`tiny-qwen3`)."""
    if checkpoint.startswith("builtin:"):
        return sanitize_model_name(checkpoint.split(":", 1)[1])
    return sanitize_model_name(Path(checkpoint.rstrip("/")).name or checkpoint)


def resolve_checkpoint(checkpoint: str) -> str:
    """A local path for a checkpoint dir, a Hugging Face name or builtin:tiny-qwen3."""

    return resolve_model(checkpoint)


# ------------------------------------------------------------------------------------------- the family

def checkpoint_family(checkpoint: str, override: str | None = None) -> ModelFamily:
    """The family of a resolved checkpoint (common/model_families.py): `override` (the `model_family` key) wins; a
    folder is read from its files (a LoRA adapter's, else its base model's); a Hugging Face name through
    transformers' tokenizer and config. UnknownFamily (one line naming the key) when the table cannot tell."""
    if override:
        return family(override)
    folder = Path(checkpoint)
    if folder.is_dir():
        try:
            return family_of_checkpoint(checkpoint)
        except UnknownFamily:
            adapter = folder / "adapter_config.json"
            if not adapter.is_file():
                raise
            base = json.loads(adapter.read_text()).get("base_model_name_or_path")
            if not base:
                raise
            return checkpoint_family(resolve_checkpoint(base))
    from transformers import AutoConfig, AutoTokenizer

    try:
        tokenizer, config = AutoTokenizer.from_pretrained(checkpoint), AutoConfig.from_pretrained(checkpoint)
    except (OSError, ValueError) as err:
        raise UnknownFamily(f"cannot tell the model family of {checkpoint} (its tokenizer and config did not load: "
                            f"{type(err).__name__}); set `{FAMILY_KEY}` to one of: {known_keys()}") from None
    return family_of(tokenizer, config)


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in a command line (`--flag V` or `--flag=V`), None when absent."""
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def vllm_parser_args(model_family: ModelFamily, extra_args: Sequence[str] = (), reasoning: bool = False) -> list[str]:
    """`--enable-auto-tool-choice --tool-call-parser P [--reasoning-parser R]` from the family table; R only with
    `reasoning` (opt-in: a checkpoint trained without think blocks writes bare answers, which vLLM's qwen3 parser
    reads as all reasoning, leaving Terminus-2 no content). A parser in extra_args must be the family's own (it is
    then not repeated; the family's reasoning parser given there opts in too); any other is refused, one line: to
    serve with another family's parsers, name that family (`--model_family`)."""
    if model_family.vllm_tool_call_parser is None:
        raise UserError(f"{model_family.key}: the family table names no vLLM --tool-call-parser confirmed for the "
                        f"pinned vLLM; none is guessed (docs/models.md)")
    args = [] if "--enable-auto-tool-choice" in extra_args else ["--enable-auto-tool-choice"]
    for flag, ours in (("--tool-call-parser", model_family.vllm_tool_call_parser),
                       ("--reasoning-parser", model_family.vllm_reasoning_parser)):
        theirs = _flag_value(extra_args, flag)
        if theirs is not None and theirs != ours:
            raise UserError(f"{flag} {theirs}: the {model_family.key} family is served with "
                            f"{ours or 'none'} (common/model_families.py); to use another family's parsers set "
                            f"`--{FAMILY_KEY}` to that family ({known_keys()})")
        if theirs is None and ours is not None and (flag == "--tool-call-parser" or reasoning):
            args += [flag, ours]
    return args


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
                 extra_args: Sequence[str] = (), model_family: ModelFamily | str | None = None,
                 reasoning: bool = False) -> list[str]:
    """The `vllm serve` command line for a (resolved) checkpoint directory or Hugging Face name.

    A PEFT adapter directory (adapter_config.json, no config.json) is served as LoRA on its base model, under
    the served name. Tool calls are parsed with the parsers the family table names for the model (model_family: a
    family or its key; None: told from the checkpoint, `checkpoint_family`), so the bash-tool agent
    (harbor_plugins/bash_tool_agent.py, requests with `tools`) gets OpenAI `tool_calls` from vLLM as it does from
    the CPU server; requests without `tools` (Terminus-2) keep their text. A parser in extra_args other than the
    family's is refused (`vllm_parser_args`). tensor_parallel_size None: every visible GPU the head count allows
    (auto_tensor_parallel)."""
    if not isinstance(model_family, ModelFamily):
        model_family = checkpoint_family(checkpoint, model_family)
    parser_args = vllm_parser_args(model_family, extra_args, reasoning)
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
    return command + parser_args + list(extra_args)


def cpu_server_args(checkpoint: str, served_model_name: str, port: int, host: str = "127.0.0.1",
                    max_model_len: int | None = None, max_new_tokens_cap: int | None = None,
                    log_level: str | None = None, model_family: str | None = None,
                    reasoning: bool = False) -> list[str]:
    """The arguments of `python -m eval.cpu_server` (the cpu backend)."""
    args = ["--checkpoint", checkpoint, "--served_model_name", served_model_name, "--host", host, "--port", str(port)]
    if model_family:
        args += ["--model_family", model_family]
    if reasoning:
        args += ["--reasoning"]
    if max_model_len:
        args += ["--max_model_len", str(max_model_len)]
    if max_new_tokens_cap:
        args += ["--max_new_tokens_cap", str(max_new_tokens_cap)]
    if log_level:
        args += ["--log_level", log_level]
    return args


def cpu_command(checkpoint: str, served_model_name: str, port: int, host: str = "127.0.0.1",
                max_model_len: int | None = None, max_new_tokens_cap: int | None = None,
                model_family: str | None = None, reasoning: bool = False) -> list[str]:
    """The command line of the cpu backend's server process."""
    return [sys.executable, "-m", "eval.cpu_server",
            *cpu_server_args(checkpoint, served_model_name, port, host, max_model_len, max_new_tokens_cap,
                             model_family=model_family, reasoning=reasoning)]


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


@contextmanager
def serve_checkpoint(checkpoint: str, backend: str = "auto", port: int | None = None, host: str = "127.0.0.1",
                     served_model_name: str | None = None, max_model_len: int | None = None,
                     max_new_tokens_cap: int | None = None, tensor_parallel_size: int | None = None,
                     extra_args: Sequence[str] = (), startup_timeout: float | None = None,
                     log_path: str | os.PathLike | None = None, env: dict | None = None,
                     model_family: str | None = None, reasoning: bool = False) -> Iterator[ServedModel]:
    """Start an OpenAI-compatible server for `checkpoint`, wait for /health, yield a ServedModel, stop it. The
    model's family (model_family, else told from the checkpoint) is settled first: UnknownFamily before any start.
    `reasoning`: the family's reasoning split off the answer (vLLM's --reasoning-parser, the CPU server's
    reasoning_content); off by default (vllm_parser_args says why)."""
    import httpx

    backend = choose_backend(backend)
    name = sanitize_model_name(served_model_name) if served_model_name else default_served_name(checkpoint)
    port = port or free_port(host)
    served_family = checkpoint_family(resolve_checkpoint(checkpoint), model_family)
    if backend == "vllm":
        command = vllm_command(resolve_checkpoint(checkpoint), name, port, host, max_model_len,
                               tensor_parallel_size, extra_args, served_family, reasoning)
        if shutil.which(command[0]) is None:
            raise RuntimeError(f"backend 'vllm': {command[0]} not found; install vllm (pip install -e '.[gpu]') or "
                               f"use backend='cpu'")
    else:
        command = cpu_command(checkpoint, name, port, host, max_model_len, max_new_tokens_cap,
                              model_family=served_family.key, reasoning=reasoning)
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
        # the errors name the URL, the backend, the checkpoint and the server's log, whose tail they quote
        wait_until_healthy(url, process, timeout, interval=0.25, details=lambda: (
            f" (the {backend} server for {checkpoint}); its log ({log_path}) ends with:\n{served.log_tail()}"))
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
        stop_process(process, grace=15.0)  # SIGTERM to the server's process group (vLLM has workers), then SIGKILL
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
                        help="cpu backend: upper bound on generated tokens per request, whatever max_tokens says "
                             "(default: %(default)s)")
    parser.add_argument("--tensor_parallel_size", type=int, default=None,
                        help="vllm backend (default: every visible GPU that divides the attention heads)")
    parser.add_argument("--log_level", default="warning", help="uvicorn log level (cpu backend)")
    parser.add_argument("--model_family", choices=list(FAMILIES), default=None,
                        help="the model's family in common/model_families.py (docs/models.md), which picks the "
                             "tool-call and reasoning parsers (default: told from the chat template and "
                             "config.model_type; a model it cannot tell is refused)")
    parser.add_argument("--reasoning", action="store_true",
                        help="split the family's reasoning off the answer (vLLM's --reasoning-parser, the CPU "
                             "server's reasoning_content); off by default: a checkpoint trained without think "
                             "blocks would answer with no content (docs/models.md#reasoning)")
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
    try:
        served_family = checkpoint_family(resolve_checkpoint(args.checkpoint), args.model_family)
        if backend == "vllm":
            command = vllm_command(resolve_checkpoint(args.checkpoint), name, args.port, args.host,
                                   args.max_model_len, args.tensor_parallel_size, args.vllm_args, served_family,
                                   args.reasoning)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if backend == "vllm":
        print(" ".join(command), file=sys.stderr, flush=True)
        if shutil.which(command[0]) is None and not Path(command[0]).exists():
            print(f"error: {command[0]} not found; install vllm or use --backend cpu", file=sys.stderr)
            return 2
        os.execvp(command[0], command)
    return cpu_server.main(cpu_server_args(args.checkpoint, name, args.port, args.host, args.max_model_len,
                                           args.max_new_tokens_cap, args.log_level, served_family.key,
                                           args.reasoning))


if __name__ == "__main__":
    sys.exit(main())
