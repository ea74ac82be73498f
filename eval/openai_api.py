"""The OpenAI chat-completions surface the eval servers share (eval/cpu_server.py, eval/scripted_teacher.py).
Runs in: the training venv (FastAPI), in the server's process.

`GET /health`, `GET /v1/models`, `POST /v1/chat/completions`, vLLM-style error bodies, the response shapes. Each
server supplies its health payload, its model list and how it answers a request body (a `RequestError` becomes a
4xx with vLLM's error body; anything else a 500).
"""

# No `from __future__ import annotations` here: FastAPI reads the endpoint's `request: Request` annotation, which
# must be the class itself, since fastapi is imported inside create_app (importing this module stays light).

import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from common.errors import RequestError


def error_body(message: str, status: int, param: str | None = None) -> dict:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "InternalServerError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def message_text(content: Any) -> Any:
    """OpenAI content parts ([{type: text, text}]) flattened to a string; strings and None pass through."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content


def request_tools(body: dict) -> list[dict] | None:
    """A request's `tools`, checked (a RequestError, so a 400, for anything but a list of function tools with a
    name); None when there are none."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise RequestError(f"tools must be a list of function tools, got {type(tools).__name__}", param="tools")
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise RequestError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}, got "
                               f"{json.dumps(tool)[:120]}", param="tools")
        if not isinstance(function.get("name"), str) or not function["name"]:
            raise RequestError(f"tools[{i}].function.name must be a non-empty string", param="tools")
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise RequestError(f"tools[{i}].function.parameters must be a JSON schema object", param="tools")
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise RequestError(f"tool_choice {json.dumps(choice)[:80]} is not supported: use \"auto\" or \"none\"",
                           param="tool_choice")
    return tools


def model_list(name: str, created: int, max_model_len: int | None) -> dict:
    """`GET /v1/models` for one served model, with vLLM's `max_model_len`."""
    return {"object": "list", "data": [{
        "id": name, "object": "model", "created": created, "owned_by": "terminal-recipes", "root": name,
        "parent": None, "max_model_len": max_model_len}]}


def tool_call(name: str, arguments: dict, call_id: str | None = None) -> dict:
    """One OpenAI tool call of an assistant message: `arguments` as a JSON string, as OpenAI and vLLM send them."""
    return {"id": call_id or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def chat_completion(model: str, text: str | None, finish_reason: str, prompt_tokens: int, completion_tokens: int,
                    tool_calls: list[dict] | None = None, reasoning_content: str | None = None) -> dict:
    """A non-streaming chat completion with one assistant choice (with `tool_calls` when given: finish_reason
    "tool_calls", and content the text around them, None when there is none; `reasoning_content` when given)."""
    message = {"role": "assistant", "content": text}
    if reasoning_content is not None:
        message["reasoning_content"] = reasoning_content
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }


def create_app(title: str, health: Callable[[], dict], models: Callable[[], dict],
               complete: Callable[[Any], Awaitable[dict]]):
    """The FastAPI app: `complete(body)` answers a parsed request body with a chat completion."""
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI(title=title)

    @app.get("/health")
    async def get_health():
        return health()

    @app.get("/v1/models")
    async def get_models():
        return models()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        try:
            try:
                body = json.loads(await request.body())
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise RequestError(f"the request body is not valid JSON: {exc}")
            return await complete(body)
        except RequestError as exc:
            return JSONResponse(error_body(exc.message, exc.status, exc.param), status_code=exc.status)
        except Exception as exc:  # a failure while answering is the server's fault, not the caller's
            return JSONResponse(error_body(f"{type(exc).__name__}: {exc}", 500), status_code=500)

    return app
