"""The CPU server's tool-call parsers, one per format of the family table: generated text -> content, OpenAI calls.
Runs in: the training venv (standard library only), in eval/cpu_server.py's process.

Each follows the vLLM parser the table names for its format (common/model_families.py): `hermes_json` as vLLM's
`hermes`, `qwen3_xml` as `qwen3_coder` (values typed by the request's tool schema), `llama3_json` as `llama3_json`,
`glm45_xml` as `glm45`. A format with no parser here (gpt-oss's harmony) is refused when the server starts.
`parse_answer`: the reasoning split off first (common/reasoning.py), then the calls read from the content, as vLLM.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable

from common.errors import ConfigError
from common.model_families import GLM45_XML, HERMES_JSON, LLAMA3_JSON, QWEN3_XML, ModelFamily
from common.reasoning import split_reasoning as reasoning_split
from eval.openai_api import tool_call

Parsed = tuple[str | None, list[dict]]

# vLLM's hermes tool parser's pattern: closed blocks, or an unclosed one running to the end of the answer
HERMES_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
# vLLM's qwen3_coder patterns: blocks, functions and parameters, each closed or running to the end
XML_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*?)$", re.DOTALL)
XML_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
XML_PARAMETER = re.compile(r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL)
GLM_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)  # vLLM glm45 (glm4_moe_tool_parser)
GLM_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


def parse_hermes_json(text: str, tools: list[dict] | None = None) -> Parsed:
    """`<tool_call>` blocks of `{"name": str, "arguments": object}` JSON (Qwen3, Hermes). An answer with no block,
    or with one that is not such JSON, is all content, no calls (vLLM's hermes parser)."""
    if "<tool_call>" not in text:
        return text, []
    calls = []
    for match in HERMES_BLOCK.finditer(text):
        raw = match.group(1) if match.group(1) is not None else match.group(2)
        try:
            call = json.loads(raw)
        except json.JSONDecodeError:
            return text, []
        if not (isinstance(call, dict) and isinstance(call.get("name"), str) and call["name"]
                and isinstance(call.get("arguments", {}), dict)):
            return text, []
        calls.append(tool_call(call["name"], call.get("arguments", {})))
    content = HERMES_BLOCK.sub("", text).strip()
    return content or None, calls


def _schema_types(tools: list[dict] | None, function: str, parameter: str,
                  default: list[str] = ["string"]) -> list[str]:  # noqa: B006 (never mutated)
    """The JSON-schema types the request's tool declares for a parameter (`default` when it declares none)."""
    for tool in tools or []:
        spec = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(spec, dict) and spec.get("name") == function:
            schema = ((spec.get("parameters") or {}).get("properties") or {}).get(parameter)
            if not isinstance(schema, dict):
                return default
            kinds = schema.get("type")
            kinds = [kinds] if isinstance(kinds, str) else [k for k in kinds or [] if isinstance(k, str)]
            return kinds or ["string"]
    return default


def _typed(value: str, kinds: list[str]) -> object:
    """A raw parameter value as the schema's type, tried null > integer > number > boolean > object/array > string
    (vLLM's coercion for qwen3_coder); a value none of them reads stays text (or JSON, if it parses)."""
    kinds = [k.strip().lower() for k in kinds]
    for kind in ("null", "integer", "number", "boolean", "object", "array", "string"):
        if kind not in kinds:
            continue
        if kind == "null" and value.lower() == "null":
            return None
        if kind == "string":
            return value
        if kind == "integer":
            try:
                return int(value)
            except ValueError:
                continue
        if kind == "number":
            try:
                number = float(value)
                return int(number) if number.is_integer() else number
            except (ValueError, OverflowError):
                continue
        if kind == "boolean" and value.strip().lower() in ("true", "1", "false", "0"):
            return value.strip().lower() in ("true", "1")
        if kind in ("object", "array"):
            try:
                return json.loads(value)
            except ValueError:
                continue
    try:
        return json.loads(value)
    except ValueError:
        return value


def parse_qwen3_xml(text: str, tools: list[dict] | None = None) -> Parsed:
    """`<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>` (Qwen3.5/3.6/3.8,
    Nemotron 3 Nano, Qwen3-Coder), as vLLM's qwen3_coder reads it: no `<function=` means no call; a missing close
    runs to the end; one newline around each value is the layout's; values are typed by the request's tool schema;
    the content is the text before the first call (None when empty)."""
    if "<function=" not in text:
        return text, []
    blocks = [m.group(1) if m.group(1) is not None else m.group(2) for m in XML_BLOCK.finditer(text)] or [text]
    calls = []
    for block in blocks:
        for match in XML_FUNCTION.finditer(block):
            body = match.group(1) if match.group(1) is not None else match.group(2)
            name, sep, parameters = body.partition(">")
            if not sep or not name:
                continue
            arguments = {}
            for raw in XML_PARAMETER.findall(parameters):
                key, sep, value = raw.partition(">")
                if not sep:
                    continue
                value = value.removeprefix("\n").removesuffix("\n")
                arguments[key] = _typed(value, _schema_types(tools, name, key))
            calls.append(tool_call(name, arguments))
    if not calls:
        return text, []
    start = text.find("<tool_call>")
    content = text[:start if start >= 0 else text.find("<function=")]
    return content or None, calls


def parse_llama3_json(text: str, tools: list[dict] | None = None) -> Parsed:
    """Bare JSON objects `{"name": ..., "parameters" | "arguments": {...}}` (Llama 3.1/3.2), as vLLM's llama3_json
    reads them: every top-level `{` must start such an object, else the whole answer is content; with calls, there
    is no content."""
    decoder = json.JSONDecoder()
    calls, end = [], -1
    for match in re.finditer(r"\{", text):
        if match.start() <= end:
            continue
        try:
            obj, length = decoder.raw_decode(text[match.start():])
            name = obj["name"]
            arguments = obj["arguments"] if "arguments" in obj else obj["parameters"]
        except (ValueError, KeyError, TypeError):
            return text, []
        end = match.start() + length
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return text, []
        calls.append(tool_call(name, arguments))
    return (None, calls) if calls else (text, [])


def parse_glm45_xml(text: str, tools: list[dict] | None = None) -> Parsed:
    """`<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>` (GLM-4.5/4.6), as vLLM's glm45
    reads it: a value the schema types as a string is kept as written, any other is read as JSON (or a Python
    literal) where it parses; the content is the text before the first call (None when blank)."""
    calls = []
    for match in GLM_BLOCK.finditer(text):
        name, newline, body = match.group(1).partition("\n")
        if not newline or not name.strip():
            continue
        arguments = {}
        for key, value in GLM_ARGUMENT.findall(body):
            key = key.strip()
            kinds = set(_schema_types(tools, name.strip(), key, default=[])) - {"null"}
            arguments[key] = value if kinds == {"string"} else _literal(value.strip())
        calls.append(tool_call(name.strip(), arguments))
    if not calls:
        return text, []
    content = text[:text.find("<tool_call>")]
    return (content if content.strip() else None), calls


def _literal(value: str) -> object:
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return value


TOOL_CALL_PARSERS: dict[str, Callable[[str, list[dict] | None], Parsed]] = {
    HERMES_JSON: parse_hermes_json, QWEN3_XML: parse_qwen3_xml, LLAMA3_JSON: parse_llama3_json,
    GLM45_XML: parse_glm45_xml,
}


def parser_for(family: ModelFamily) -> Callable[[str, list[dict] | None], Parsed]:
    """The CPU server's parser of a family's tool calls; ConfigError (one line) for a format it cannot parse."""
    if family.tool_call_format not in TOOL_CALL_PARSERS:
        raise ConfigError(f"the CPU server cannot parse {family.key}'s tool calls ({family.tool_call_format} has no "
                          f"parser in eval/tool_calls.py); serve this model with vLLM (--backend vllm)")
    return TOOL_CALL_PARSERS[family.tool_call_format]


def parse_answer(family: ModelFamily, text: str, tools: list[dict] | None = None, parse_tools: bool = False,
                 enable_thinking: bool | None = None,
                 split_reasoning: bool = True) -> tuple[str | None, str | None, list[dict]]:
    """(reasoning, content, OpenAI tool calls) of one generated answer, as vLLM serving `family` with its reasoning
    and tool-call parsers answers: the reasoning split off first (unless `split_reasoning` is off: vLLM with no
    reasoning parser), the calls then read from the content only (none when the reasoning left no content, or when
    `parse_tools` is off)."""
    reasoning, content = (reasoning_split(family, text, enable_thinking) if split_reasoning else (None, text))
    calls: list[dict] = []
    if parse_tools and content is not None:
        content, calls = parser_for(family)(content, tools)
    return reasoning, content, calls
