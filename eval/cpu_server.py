"""The built-in CPU OpenAI-compatible server: a checkpoint loaded with transformers, `generate` behind the chat API.
Runs in: its own process, in the training venv (torch, Transformers, FastAPI, uvicorn); eval/serve.py's `cpu` backend.

    python -m eval.cpu_server --checkpoint builtin:tiny-qwen3 --served_model_name tiny-qwen3 --port 8000

`GET /health`, `GET /v1/models`, `POST /v1/chat/completions`, one request at a time, reasoning (`reasoning_content`)
and tool calls as the vLLM parsers of the model's family return them (eval/tool_calls.py; the family from
common/model_families.py, or `--model_family`); a family it cannot tell or parse is refused at start. What it
refuses and how it renders tools: docs/evaluation.md#serving-a-checkpoint-evalservepy; reasoning: docs/models.md.
"""

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from common.errors import RequestError, UserError
from common.model_families import FAMILIES, family_of
from eval.openai_api import chat_completion, message_text, model_list, request_tools
from eval.openai_api import create_app as create_openai_app
from eval.tool_calls import parse_answer, parser_for
from modeling.tiny_model import resolve_model as resolve_checkpoint

DEFAULT_MAX_NEW_TOKENS_CAP = 1024


def _template_messages(messages: list) -> list[dict]:
    """Request messages as the chat template wants them: content parts flattened, and assistant tool calls'
    `arguments` (JSON strings, OpenAI style) read back into objects."""
    out = []
    for i, message in enumerate(messages):
        message = {**message, "content": message_text(message.get("content"))}
        calls = message.get("tool_calls")
        if calls is not None:
            if message.get("role") != "assistant" or not isinstance(calls, list):
                raise RequestError(f"messages[{i}].tool_calls: only an assistant message has tool_calls, a list",
                                   param="messages")
            fixed = []
            for j, call in enumerate(calls):
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                    raise RequestError(f"messages[{i}].tool_calls[{j}] must be {{\"type\": \"function\", "
                                       f"\"function\": {{\"name\", \"arguments\"}}}}", param="messages")
                arguments = function.get("arguments")
                if isinstance(arguments, str):
                    try:
                        arguments = json.loads(arguments) if arguments.strip() else {}
                    except json.JSONDecodeError as err:
                        raise RequestError(f"messages[{i}].tool_calls[{j}].function.arguments is not valid JSON "
                                           f"({err.msg})", param="messages") from None
                fixed.append({**call, "function": {**function, "arguments": arguments or {}}})
            message["tool_calls"] = fixed
        out.append(message)
    return out


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
                 max_new_tokens_cap: int = DEFAULT_MAX_NEW_TOKENS_CAP, device: str | None = None,
                 model_family: str | None = None, reasoning: bool = False):
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
        # the family's tool-call parser, or one line naming the `model_family` key / the missing parser
        self.family = family_of(self.tokenizer, self.model.config, model_family)
        self.reasoning = reasoning and self.family.vllm_reasoning_parser is not None  # opt-in (eval/serve.py)
        parser_for(self.family)  # a format with no parser here (harmony) is refused now, not at the first call
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
        return model_list(self.served_model_name, self.created, self.max_model_len)

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
        messages = _template_messages(messages)
        tools = request_tools(body)
        template_kwargs = {"tools": tools} if tools else {}
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
            "parse_tools": bool(tools) and body.get("tool_choice") != "none",
            "tools": tools,
            "enable_thinking": template_kwargs.get("enable_thinking"),
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
        # with tools, the special tokens stay (<tool_call> is one), as vLLM's tool parsers have it decode; so do
        # they for a family whose reasoning is marked (a tokenizer may make <think> special, harmony's markers are)
        keep = req["parse_tools"] or self.reasoning
        text = self.tokenizer.decode(text_ids, skip_special_tokens=not keep)
        hits = [i for i in (text.find(s) for s in req["stop"]) if i >= 0]
        if hits:
            text, finish = text[:min(hits)], "stop"
        reasoning, text, calls = parse_answer(self.family, text, req["tools"], req["parse_tools"],
                                              req["enable_thinking"], split_reasoning=self.reasoning)
        return chat_completion(self.served_model_name, text, "tool_calls" if calls else finish,
                               len(req["prompt_ids"]), len(new), tool_calls=calls, reasoning_content=reasoning)


def create_app(generator: Generator):
    lock = asyncio.Lock()

    async def complete(body) -> dict:
        request = generator.prepare(body)
        async with lock:  # one generation at a time: the CPU is the bottleneck anyway
            return await asyncio.to_thread(generator.generate, request)

    return create_openai_app("terminal-recipes CPU OpenAI-compatible server",
                             lambda: {"status": "ok", "model": generator.served_model_name}, generator.models,
                             complete)


# ------------------------------------------------------------------------------------------------- CLI

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m eval.cpu_server",
        description="The built-in CPU OpenAI-compatible server (/v1/chat/completions, /v1/models, /health) for one "
                    "checkpoint. `python -m eval.serve --backend cpu` starts it with a sanitized served name.")
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint dir, Hugging Face name, or builtin:tiny-qwen3")
    parser.add_argument("--served_model_name", required=True,
                        help="the name clients send as `model` (used as given)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max_model_len", type=int, default=None,
                        help="context length (prompt + completion); default: the model's max_position_embeddings")
    parser.add_argument("--max_new_tokens_cap", type=int, default=DEFAULT_MAX_NEW_TOKENS_CAP,
                        help="upper bound on generated tokens per request, whatever max_tokens says "
                             "(default: %(default)s)")
    parser.add_argument("--log_level", default="warning", help="uvicorn log level")
    parser.add_argument("--reasoning", action="store_true",
                        help="reasoning apart in reasoning_content, as vLLM's reasoning parser of the family returns "
                             "it (off by default: the answer's text is all content)")
    parser.add_argument("--model_family", choices=list(FAMILIES), default=None,
                        help="the model's family (common/model_families.py), which picks the tool-call parser "
                             "(default: told from the chat template and config.model_type)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    import uvicorn

    args = parse_args(argv)
    try:
        generator = Generator(args.checkpoint, args.served_model_name, args.max_model_len, args.max_new_tokens_cap,
                              model_family=args.model_family, reasoning=args.reasoning)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"serving {args.served_model_name} ({generator.device}, max_model_len {generator.max_model_len}, family "
          f"{generator.family.key}) at "
          f"http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    uvicorn.run(create_app(generator), host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
