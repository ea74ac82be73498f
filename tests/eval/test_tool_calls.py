"""eval/tool_calls.py: for each family, an assistant turn with a bash tool call rendered by the family's real TRL
template is parsed back by the CPU-server parser the family table picks, command and all; each parser's edges as
the vLLM parser it follows has them; a format with no CPU parser is refused in one line. With a reasoning block
before it, the CPU server's parse gives the reasoning apart and the call from the content, the bash-tool agent runs
the command of that message, and Harbor's Terminus-2 parser reads a JSON action after reasoning, split or not."""

import json
import os
import subprocess

import pytest
from conftest import REPO, with_reasoning

from common.errors import ConfigError
from common.model_families import FAMILIES, trl_template_dir
from common.reasoning import split_reasoning
from eval.tool_calls import parse_answer, parse_glm45_xml, parse_llama3_json, parse_qwen3_xml, parser_for

TEMPLATES = [(fam.key, name) for fam in FAMILIES.values() for name in fam.templates
             if name not in fam.templates_without_tools]
COMMAND = ('cd /srv/app && grep -rn "TODO" src | head -n 5\n'
           'printf \'{"a": [1, 2]}\\n\' > x.json && echo "$HOME" \'single\' `date`')
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a command in the shell.",
          "parameters": {"type": "object", "properties": {"command": {"type": "string"},
                                                          "timeout": {"type": "integer"}},
                         "required": ["command"]}}}]
HARBOR_PYTHON = REPO / ".venv-harbor" / "bin" / "python"
THOUGHT = "I should look for TODO markers; grep is enough."
STOPS = ("<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<|user|>", "<|observation|>")  # end-of-turn, cut by the server


@pytest.fixture(scope="module")
def own_tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def generated_turn(tokenizer, name: str, arguments: dict) -> str:
    """What the model writes after the prompt when it makes this call: the rendering of the conversation with the
    assistant turn, past the rendering of the prompt (with its generation prompt), end-of-turn marker cut."""
    tokenizer.chat_template = (trl_template_dir() / f"{name}.jinja").read_text(encoding="utf-8")
    user = [{"role": "user", "content": "Find the TODOs."}]
    call = {"type": "function", "function": {"name": "bash", "arguments": arguments}}
    prompt = tokenizer.apply_chat_template(user, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(user + [{"role": "assistant", "content": "", "tool_calls": [call]}],
                                         tools=TOOLS, tokenize=False)
    text = full[len(os.path.commonprefix([prompt, full])):].rstrip("\n")
    for stop in STOPS:
        text = text.removesuffix(stop)
    return text


@pytest.mark.parametrize("key,name", TEMPLATES, ids=[name for _, name in TEMPLATES])
def test_a_bash_call_rendered_by_the_familys_template_parses_back(key, name, own_tokenizer):
    family = FAMILIES[key]
    arguments = {"command": COMMAND} if key == "llama3_1" else {"command": COMMAND, "timeout": 30}
    text = generated_turn(own_tokenizer, name, arguments)
    assert "bash" in text, text
    if family.tool_call_format == "harmony":
        with pytest.raises(ConfigError) as error:
            parser_for(family)
        assert "\n" not in str(error.value) and "harmony" in str(error.value) and "vLLM" in str(error.value)
        return
    content, [call] = parser_for(family)(text, TOOLS)
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == arguments  # the command byte for byte, timeout an int
    assert content is None or "bash" not in content


def test_the_hermes_parser_does_not_read_the_xml_calls(own_tokenizer):
    """The bug the table fixes: a Qwen3.5 call read by the qwen3 family's parser is no call at all."""
    text = generated_turn(own_tokenizer, "qwen3_5_think", {"command": "ls"})
    assert parser_for(FAMILIES["qwen3"])(text, TOOLS) == (text, [])
    assert parser_for(FAMILIES["qwen3_5"])(text, TOOLS)[1]


def call_args(parsed):
    return [json.loads(call["function"]["arguments"]) for call in parsed[1]]


def test_qwen3_xml_as_vllms_qwen3_coder():
    block = "<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n</function>\n</tool_call>"
    assert parse_qwen3_xml("Let me look.\n\n" + block, TOOLS)[0] == "Let me look.\n\n"
    assert parse_qwen3_xml(block + "\n" + block)[0] is None and len(parse_qwen3_xml(block + block)[1]) == 2
    # one newline each side is the layout's; the rest is the value's
    assert call_args(parse_qwen3_xml(block.replace("ls -la", "\n  ls -la  \n"))) == [{"command": "\n  ls -la  \n"}]
    # cut by max_tokens: an unclosed block, function and parameter run to the end
    assert call_args(parse_qwen3_xml("<tool_call>\n<function=bash>\n<parameter=command>\nls -la")) == \
        [{"command": "ls -la"}]
    # values typed by the request's schema; undeclared ones stay text
    typed = "<function=bash>\n<parameter=command>\n42\n</parameter>\n<parameter=timeout>\n42\n</parameter>\n" \
            "<parameter=other>\ntrue\n</parameter>\n</function>"
    assert call_args(parse_qwen3_xml(typed, TOOLS)) == [{"command": "42", "timeout": 42, "other": "true"}]
    schema = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {
        "n": {"type": "number"}, "b": {"type": "boolean"}, "o": {"type": "object"}, "x": {"type": ["null", "string"]},
        "bad": {"type": "integer"}}}}}]
    values = "<function=f><parameter=n>2.5</parameter><parameter=b>False</parameter><parameter=o>{\"k\": [1]}" \
             "</parameter><parameter=x>null</parameter><parameter=bad>many</parameter></function>"
    assert call_args(parse_qwen3_xml(values, schema)) == [{"n": 2.5, "b": False, "o": {"k": [1]}, "x": None,
                                                           "bad": "many"}]
    for text in ("no call", "<tool_call>\n{\"name\": \"bash\"}\n</tool_call>", "<function=>x</function>"):
        assert parse_qwen3_xml(text, TOOLS) == (text, [])


def test_llama3_json_as_vllms_llama3_json():
    one = '{"name": "bash", "parameters": {"command": "ls"}}'
    assert call_args(parse_llama3_json(one)) == [{"command": "ls"}] and parse_llama3_json(one)[0] is None
    two = '{"name": "bash", "arguments": {"command": "ls"}}; ' + one
    assert call_args(parse_llama3_json(two)) == [{"command": "ls"}, {"command": "ls"}]
    for text in ("plain words", '{"command": "ls"}', '{"name": "bash", "parameters": {"command": "ls"}',
                 'I ran {this}'):
        assert parse_llama3_json(text) == (text, [])


def test_glm45_as_vllms_glm45():
    block = "<tool_call>bash\n<arg_key>command</arg_key>\n<arg_value>ls {a,b}</arg_value>\n" \
            "<arg_key>timeout</arg_key>\n<arg_value>30</arg_value>\n</tool_call>"
    content, calls = parse_glm45_xml("<think></think>\n" + block, TOOLS)
    assert content == "<think></think>\n" and call_args((content, calls)) == [{"command": "ls {a,b}", "timeout": 30}]
    # without a schema a value is read as JSON where it parses
    assert call_args(parse_glm45_xml(block.replace("ls {a,b}", "[1, 2]"))) == [{"command": [1, 2], "timeout": 30}]
    for text in ("no call", "<tool_call>bash</tool_call>"):
        assert parse_glm45_xml(text, TOOLS) == (text, [])


# ------------------------------------------------------------------ reasoning before the call (issue 21, c and d)

def harbor_probe(mode: str, items: list) -> list[dict]:
    """tests/harbor_probe.py in the Harbor venv (skipped where it is missing)."""
    if not HARBOR_PYTHON.exists():
        pytest.skip(f"{HARBOR_PYTHON} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    run = subprocess.run([str(HARBOR_PYTHON), str(REPO / "tests" / "harbor_probe.py"), str(REPO), mode],
                         input=json.dumps(items), capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def reasoned_calls(own_tokenizer) -> dict[str, tuple]:
    """name -> (family, the generated text: a reasoning block then the bash call, the CPU server's parse of it)."""
    out = {}
    for key, name in TEMPLATES:
        family = FAMILIES[key]
        text = with_reasoning(family, generated_turn(own_tokenizer, name, {"command": COMMAND}), THOUGHT)
        parsed = None if family.tool_call_format == "harmony" else parse_answer(family, text, TOOLS, parse_tools=True)
        out[name] = (family, text, parsed)
    return out


@pytest.mark.parametrize("key,name", TEMPLATES, ids=[name for _, name in TEMPLATES])
def test_reasoning_then_the_call_parses_to_both_apart(key, name, reasoned_calls):
    family, text, parsed = reasoned_calls[name]
    if parsed is None:  # gpt-oss: the reasoning splits off its analysis channel; the call is vLLM's to parse
        reasoning, content = split_reasoning(family, text)
        assert reasoning == THOUGHT and content is None and "functions.bash" not in reasoning
        with pytest.raises(ConfigError):
            parser_for(family)
        return
    reasoning, content, [call] = parsed
    assert json.loads(call["function"]["arguments"]) == {"command": COMMAND}
    if family.reasoning_format is None:  # Llama 3.1 writes no reasoning: no split
        assert reasoning is None
        return
    assert reasoning.strip() == THOUGHT and (content is None or THOUGHT not in content)
    # the same text without reasoning parses to the same call
    [bare] = parse_answer(family, text.split("</think>", 1)[1], TOOLS, parse_tools=True, enable_thinking=False)[2]
    assert bare["function"] == call["function"]


def test_the_bash_tool_agent_runs_the_command_of_each_familys_reasoned_call(reasoned_calls):
    messages = {name: {"role": "assistant", "content": parsed[1], "tool_calls": parsed[2],
                       **({"reasoning_content": parsed[0]} if parsed[0] is not None else {})}
                for name, (_, _, parsed) in reasoned_calls.items() if parsed is not None}
    # vLLM's newer field name for the same thing
    messages["vllm-reasoning-field"] = {**messages["qwen3"], "reasoning": messages["qwen3"]["reasoning_content"]}
    del messages["vllm-reasoning-field"]["reasoning_content"]
    results = harbor_probe("agent", list(messages.values()))
    for name, message, result in zip(messages, messages.values(), results):
        assert result["commands"] == [COMMAND], name
        assert result["reasoning"][1] == (message.get("reasoning_content") or message.get("reasoning")), name


def test_harbors_terminus_2_parser_reads_the_action_after_reasoning_split_or_not():
    action = {"analysis": "Look {first}.", "plan": "List.", "commands": [{"keystrokes": "ls -la\n", "duration": 0.1}],
              "task_complete": False}
    answer = json.dumps(action, indent=2)
    texts = {"plain": answer}
    for key, family in FAMILIES.items():
        raw = with_reasoning(family, answer, "A {brace} in thought, then the JSON.")
        texts[f"{key}: as generated"] = raw
        texts[f"{key}: content after the split"] = split_reasoning(family, raw)[1]
    # gpt-oss decoded without its special tokens (a server with no harmony split): the marker words stay
    texts["gptoss: markers dropped"] = "analysisA thought, then the JSON.assistantfinal" + answer
    results = dict(zip(texts, harbor_probe("terminus", list(texts.values()))))
    for name, result in results.items():
        assert result["keystrokes"] == ["ls -la\n"] and result["error"] == "", (name, result)
    assert results["plain"]["warning"] == ""
    for key, family in FAMILIES.items():  # the split leaves Harbor nothing to warn about
        assert results[f"{key}: content after the split"]["warning"] == "", key
        if family.reasoning_format is not None:  # unsplit, Harbor tolerates the reasoning with a warning
            assert results[f"{key}: as generated"]["warning"], key


@pytest.mark.parametrize("key", list(FAMILIES))
def test_without_the_reasoning_opt_in_the_answer_is_all_content(key):
    """The CPU server's default (no --reasoning), as vLLM with no --reasoning-parser: nothing is split off, so a
    model trained without think blocks keeps its bare answer as content."""
    family = FAMILIES[key]
    for text in ("ls -la", "<think>look first</think>ls -la"):
        assert parse_answer(family, text, split_reasoning=False) == (None, text, [])
