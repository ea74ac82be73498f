"""One source's rows: reading them (JSONL, plain or gzip; Harbor job dirs; Hugging Face datasets) and converting them.
Runs in: the training venv (datasets for Hugging Face sources), where the SFT corpus or GRPO prompts are read.

Shapes (`format`): chat (OpenAI or ShareGPT messages, TRL prompt/completion), pivot (NeMo Gym terminal-pivot rows),
harbor (trial trajectories), grpo (prompt-only NeMo Gym rows). A bad row becomes a problem `file:line: reason`;
`load_sources` is the one place that refuses to start on them (unless `skip_invalid`). Each shape: docs/formats.md.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chat_corpus.harbor_trajectory import trajectory_to_chat
from chat_corpus.records import RecordError, normalize_chat, text_content
from common.digest import files_digest
from common.errors import CorpusError
from harbor_tasks.verdict import SCORED, trial_verdict

FORMATS = ("auto", "chat", "pivot", "harbor", "grpo")
MAX_PROBLEMS_SHOWN = 50


@dataclass
class Source:
    """One entry of a config's `datasets:` list."""

    path: str
    format: str = "auto"
    name: str | None = None  # Hugging Face dataset config
    split: str = "train"
    data_files: Any = None
    fraction: float | None = None  # keep this fraction of the source's records
    weight: float | None = None  # share of the mixture (see mixture.py)
    split_key: str | None = None  # overrides the corpus-wide split key for this source
    # rejection sampling: keep records whose metadata.reward (a Harbor trial's verifier reward) is at least this
    min_reward: float | None = None

    @classmethod
    def from_config(cls, entry: Any, where: str) -> "Source":
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, dict) or "path" not in entry:
            raise CorpusError(f"{where}: each dataset needs a 'path' (a JSONL file, a Harbor job dir or a Hugging Face name)")
        unknown = set(entry) - set(cls.__dataclass_fields__)
        if unknown:
            raise CorpusError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(cls.__dataclass_fields__)}")
        source = cls(**entry)
        if source.format not in FORMATS:
            raise CorpusError(f"{where}.format: {source.format!r} is not one of {', '.join(FORMATS)}")
        if source.fraction is not None and not 0 < source.fraction <= 1:
            raise CorpusError(f"{where}.fraction: {source.fraction} must be in (0, 1]")
        if source.weight is not None and not source.weight > 0:
            raise CorpusError(f"{where}.weight: {source.weight} must be > 0")
        if source.min_reward is not None and (isinstance(source.min_reward, bool)
                                              or not isinstance(source.min_reward, (int, float))):
            raise CorpusError(f"{where}.min_reward: {source.min_reward!r} must be a number (e.g. 1.0: keep the "
                              "trajectories whose verifier reward is at least 1.0)")
        return source


@dataclass
class LoadedSource:
    source: Source
    # {"messages", "tools"} (a chat record) or what `convert` returns, with "origin", "group", "format"
    records: list[dict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "file:line: reason"
    n_rows: int = 0
    formats: dict[str, int] = field(default_factory=dict)
    missing_split_key: int = 0
    below_min_reward: int = 0  # valid records whose reward is under the source's min_reward
    no_reward: int = 0  # valid records without a reward, left out because the source has a min_reward


def dotted_get(row: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(row, dict) or part not in row:
            return None
        row = row[part]
    return row


def detect_format(row: Any) -> str:
    if not isinstance(row, dict):
        raise RecordError(f"expected a JSON object, got {type(row).__name__}")
    if "responses_create_params" in row:
        return "pivot" if "expected_answer" in row else "grpo"
    if "steps" in row and "schema_version" in row:
        return "harbor"
    if "messages" in row or "conversations" in row or ("prompt" in row and "completion" in row):
        return "chat"
    raise RecordError("unknown record shape: expected 'messages' or 'conversations' (chat), 'responses_create_params' "
                      "+ 'expected_answer' (terminal pivot), 'responses_create_params' alone (a GRPO prompt) or an "
                      f"ATIF trajectory ('schema_version', 'steps'); got keys {_keys(row)}")


def _keys(row: dict) -> list[str]:
    return sorted(row)[:12]


def responses_input(row: dict) -> list[dict]:
    """`responses_create_params.input` as chat messages, for pivot rows and GRPO prompts alike: a string is one user
    turn; each item a message with role system, developer (becomes system), user or assistant, and text content."""
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        raise RecordError("responses_create_params: missing (NeMo Gym rows carry the prompt there)")
    items = params.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise RecordError("responses_create_params.input: must be a non-empty list of messages")
    messages = []
    for index, item in enumerate(items):
        where = f"responses_create_params.input[{index}]"
        if not isinstance(item, dict):
            raise RecordError(f"{where}: must be a message object")
        if item.get("type", "message") != "message":
            raise RecordError(f"{where}: item type {item.get('type')!r} is not supported (only messages)")
        role = {"developer": "system"}.get(item.get("role"), item.get("role"))
        if role not in ("system", "user", "assistant"):
            raise RecordError(f"{where}: role {item.get('role')!r} is not one of system, developer, user, assistant")
        messages.append({"role": role, "content": text_content(item.get("content"), where)})
    return messages


def prompt_messages(row: Any) -> list[dict]:
    """A GRPO prompt: the row's `responses_create_params.input`, ending on a turn the policy answers."""
    if not isinstance(row, dict):
        raise RecordError(f"expected a JSON object, got {type(row).__name__}")
    messages = responses_input(row)
    if messages[-1]["role"] == "assistant":
        raise RecordError("responses_create_params.input: ends with an assistant turn; the policy answers the last "
                          "user turn")
    return messages


def _renamed(err: RecordError, key: str, offset: int = 0) -> RecordError:
    """normalize_chat's `messages[i]` as the row names it: `key[i - offset]` (offset: messages added in front)."""
    def rename(match):
        index = int(match.group(1)) - offset
        return f"{key}[{index}]" if index >= 0 else f"{key} (the added system turn)"
    text = re.sub(r"\bmessages\[(\d+)\]", rename, str(err))
    return RecordError(f"{key}:{text.removeprefix('messages:')}" if text.startswith("messages:") else text)


def pivot_to_chat(row: dict) -> dict:
    """A terminal-pivot row as prompt/completion: the input is context, the expected answer the only target."""
    missing = [key for key in ("responses_create_params", "expected_answer") if key not in row]
    if missing:
        raise RecordError(f"not a pivot record: no {' or '.join(map(repr, missing))} key; keys: {_keys(row)}")
    messages = [dict(m, train=False) if m["role"] == "assistant" else m for m in responses_input(row)]
    answer = row["expected_answer"]
    if not isinstance(answer, str):
        raise RecordError(f"expected_answer: must be a string (the JSON text of the next action), got "
                          f"{type(answer).__name__}; store it with json.dumps")
    if not answer.strip():
        raise RecordError("expected_answer: empty")
    messages.append({"role": "assistant", "content": answer})
    try:
        return normalize_chat(messages, row.get("tools"))
    except RecordError as err:
        raise _renamed(err, "responses_create_params.input") from None


SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "function_call": "assistant", "observation": "tool", "tool": "tool"}


def _function_calls(value: Any, where: str) -> list[dict]:
    """A ShareGPT `function_call` value: `{"name", "arguments"}` or a list of them, as JSON text or parsed."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise RecordError(f"{where}: function_call value is not valid JSON ({err.msg})") from None
    calls = [value] if isinstance(value, dict) else value
    if not isinstance(calls, list) or not calls or not all(isinstance(call, dict) for call in calls):
        raise RecordError(f"{where}: function_call value must be {{\"name\": ..., \"arguments\": ...}} or a list of them")
    return [{"type": "function", "function": call.get("function", call)} for call in calls]


def _sharegpt_turn(turn: dict, where: str) -> dict:
    speaker = turn.get("from")
    if speaker not in SHAREGPT_ROLES:
        raise RecordError(f"{where}: from {speaker!r} is not one of {', '.join(SHAREGPT_ROLES)} (ShareGPT turns; "
                          "observation and tool are tool results)")
    if "value" not in turn:
        raise RecordError(f"{where}: ShareGPT turn has no 'value'")
    if speaker == "function_call":
        message = {"role": "assistant", "content": "", "tool_calls": _function_calls(turn["value"], where)}
    else:
        message = {"role": SHAREGPT_ROLES[speaker], "content": turn["value"]}
    if turn.get("train") is not None:
        message["train"] = turn["train"]
    return message


def _json_list(value: Any, key: str) -> Any:
    """A column stored as JSON text (some sets publish `messages` so) is parsed; anything else passes."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise RecordError(f"{key}: must be a list of messages (or that list as a JSON string); got a string that "
                          f"is not valid JSON ({err.msg})") from None


def chat_to_chat(row: dict) -> dict:
    key = next((key for key in ("messages", "conversations") if key in row), None)
    if key is None:
        if "prompt" in row and "completion" in row:
            return _prompt_completion(row)
        raise RecordError("not a chat record: no 'messages', 'conversations' or 'prompt'/'completion' key; keys: "
                          f"{_keys(row)}")
    messages = _json_list(row[key], key)
    offset = 0
    if isinstance(messages, list) and any(isinstance(m, dict) and m.get("from") is not None
                                          and m.get("role") is None for m in messages):
        messages = [_sharegpt_turn(m, f"{key}[{i}]") if isinstance(m, dict) and m.get("role") is None else m
                    for i, m in enumerate(messages)]
        system = row.get("system")  # LLaMA-Factory's system column
        if isinstance(system, str) and system and not (messages and messages[0].get("role") == "system"):
            messages, offset = [{"role": "system", "content": system}] + messages, 1
    try:
        return normalize_chat(messages, row.get("tools"))
    except RecordError as err:
        if key == "messages" and not offset:
            raise
        raise _renamed(err, key, offset) from None


def _prompt_completion(row: dict) -> dict:
    prompt, completion = row["prompt"], row["completion"]
    if not isinstance(prompt, list) or not isinstance(completion, list):
        raise RecordError("prompt/completion: only the conversational form (lists of messages) is supported")
    context = [dict(m, train=False) if isinstance(m, dict) and m.get("role") == "assistant" else m for m in prompt]
    return normalize_chat(context + completion, row.get("tools"))


def refuse_prompt(row: dict) -> dict:
    raise RecordError("a GRPO prompt (responses_create_params without expected_answer): it has no target to train "
                      "on; use it with recipes/grpo.py")


CONVERTERS = {"chat": chat_to_chat, "pivot": pivot_to_chat, "harbor": trajectory_to_chat, "grpo": refuse_prompt}


def to_record(row: Any, fmt: str = "auto", prompts: bool = False) -> tuple[str, dict]:
    """(format, record) of a row: a chat record to train on, or, for a GRPO prompt row with `prompts`, the prompt
    as the GRPO recipe reads it (`{"prompt": [...]}`); without `prompts` such a row is refused."""
    if not isinstance(row, dict):
        raise RecordError(f"expected a JSON object, got {type(row).__name__}")
    fmt = detect_format(row) if fmt == "auto" else fmt
    if fmt == "grpo" and prompts:
        return fmt, {"prompt": prompt_messages(row)}
    return fmt, CONVERTERS[fmt](row)


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                origin = f"{path}:{line_no}"
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    yield origin, RecordError(f"not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1})")
                    continue
                try:
                    yield origin, json.loads(text)
                except json.JSONDecodeError as err:
                    yield origin, RecordError(f"invalid JSON: {err.msg} (column {err.colno})")
    except (OSError, EOFError) as err:  # a truncated or corrupt gzip stream
        yield f"{path}", RecordError(f"cannot read file: {err}")


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _harbor_files(path: Path) -> list[Path]:
    files = [path] if path.is_file() else sorted(path.rglob("agent/trajectory.json"))
    if not files:
        raise FileNotFoundError(f"{path}: no Harbor trajectories (agent/trajectory.json) under this directory")
    return files


def _harbor_rows(path: Path) -> Iterator[tuple[str, Any]]:
    for file in _harbor_files(path):
        origin = f"{file}:1"
        try:
            row = json.loads(file.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            yield origin, RecordError("not valid UTF-8")
            continue
        except json.JSONDecodeError as err:
            yield origin, RecordError(f"invalid JSON: {err.msg} (line {err.lineno}, column {err.colno})")
            continue
        if isinstance(row, dict):  # the trial's names become split keys (metadata.task_id, .source_trajectory_uid)
            trial_dir = file.parent.parent  # and its verdict's score metadata.reward (min_reward filters on it):
            trial = _read_json(trial_dir / "result.json")  # eval's reading, an infrastructure failure none
            metadata = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
            verdict = trial_verdict(trial)
            row["metadata"] = {
                "task_id": trial.get("task_name") or trial_dir.name.split("__")[0],
                "source_trajectory_uid": trial.get("trial_name") or trial_dir.name,
                # a scored trial without a reward has none; an agent failure scores 0; infrastructure: none
                "reward": verdict.reward if verdict.outcome == SCORED else verdict.score,
                **({"infra_kind": verdict.infra_kind} if verdict.infra_kind else {}),
                **metadata}
        yield origin, row


def _hub_dataset(source: Source):
    import datasets

    try:
        return datasets.load_dataset(source.path, source.name, split=source.split, data_files=source.data_files)
    except Exception as err:  # the hub client raises many types; the user needs the name and the cause
        raise FileNotFoundError(f"{source.path}: not a local file and not loadable as a Hugging Face dataset "
                                f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None


def _hub_rows(source: Source) -> Iterator[tuple[str, Any]]:
    for index, row in enumerate(_hub_dataset(source)):
        yield f"{source.path}[{source.split}]:{index}", row


def _kind(source: Source) -> str:
    """How a source is read: "harbor" (a job/trial dir or a trajectory file), "jsonl" or "hub"."""
    path = Path(source.path)
    if path.is_dir() or path.name == "trajectory.json":
        return "harbor"
    if path.is_file():
        return "harbor" if path.suffix == ".json" and not path.name.endswith(".jsonl") else "jsonl"
    if path.suffix in (".jsonl", ".gz", ".json") or source.path.startswith((".", "/")):
        raise FileNotFoundError(f"{source.path}: no such file")
    return "hub"


def iter_rows(source: Source) -> Iterator[tuple[str, Any]]:
    """(origin, row) pairs; a row that cannot be parsed comes as a RecordError."""
    kind = _kind(source)
    if kind == "harbor":
        yield from _harbor_rows(Path(source.path))
    elif kind == "jsonl":
        yield from _jsonl_rows(Path(source.path))
    else:
        yield from _hub_rows(source)


def source_fingerprint(source: Source) -> str:
    """A digest of everything `iter_rows` reads for the source: a JSONL file's bytes; a Harbor job's
    trajectory.json files and their trials' result.json; a Hugging Face dataset's own datasets fingerprint."""
    kind, path = _kind(source), Path(source.path)
    if kind == "jsonl":
        return files_digest([path])
    if kind == "harbor":
        files = []
        for trajectory in _harbor_files(path):
            result = trajectory.parent.parent / "result.json"
            files += [trajectory, *([result] if result.is_file() else [])]
        return files_digest(files, path if path.is_dir() else path.parent)
    return f"datasets:{_hub_dataset(source)._fingerprint}"


Convert = Callable[[Any, str], tuple[str, dict]]  # (row, the source's format) -> (format, record)


def load_source(source: Source, split_key: str, convert: Convert = to_record) -> LoadedSource:
    """Read, convert and validate every row of one source; a row `convert` refuses becomes a problem."""
    loaded = LoadedSource(source)
    key = source.split_key or split_key
    for origin, row in iter_rows(source):
        loaded.n_rows += 1
        try:
            if isinstance(row, RecordError):
                raise row
            fmt, record = convert(row, source.format)
        except RecordError as err:
            loaded.problems.append(f"{origin}: {err}")
            continue
        except (KeyError, TypeError, AttributeError) as err:  # a shape no converter checks for
            loaded.problems.append(f"{origin}: not a {source.format} record ({type(err).__name__}: {err})")
            continue
        if source.min_reward is not None:
            reward = dotted_get(row, "metadata.reward")
            if isinstance(reward, bool) or not isinstance(reward, (int, float)):
                loaded.no_reward += 1
                continue
            if reward < source.min_reward:
                loaded.below_min_reward += 1
                continue
        group = dotted_get(row, key)
        if group is None:
            loaded.missing_split_key += 1
            group = origin
        record.update(origin=origin, group=str(group), format=fmt)
        loaded.formats[fmt] = loaded.formats.get(fmt, 0) + 1
        loaded.records.append(record)
    return loaded


def parse_sources(datasets: list) -> list[Source]:
    """A config's `datasets:` entries as Sources; weights on every source or on none."""
    if not datasets:
        raise CorpusError("datasets: no sources configured; add `datasets: [{path: data/...jsonl}]` to the config")
    sources = [Source.from_config(entry, f"datasets[{i}]") for i, entry in enumerate(datasets)]
    weighted = [source.weight is not None for source in sources]
    if any(weighted) and not all(weighted):
        raise CorpusError("datasets: give a weight to every source or to none (weights are shares of the mixture)")
    return sources


def load_sources(sources: list[Source], split_key: str, skip_invalid: bool,
                 convert: Convert = to_record) -> list[LoadedSource]:
    """Load and validate every source; refuse to start on bad rows, listing each as `file:line: reason`, unless
    `skip_invalid` (then they are left out, and counted by the caller's summary)."""
    loaded = []
    for source in sources:
        try:
            loaded.append(load_source(source, split_key, convert))
        except FileNotFoundError as err:
            raise CorpusError(f"datasets: {err}") from None
    problems = [problem for item in loaded for problem in item.problems]
    if problems and not skip_invalid:
        shown = "\n  ".join(problems[:MAX_PROBLEMS_SHOWN])
        more = f"\n  ... and {len(problems) - MAX_PROBLEMS_SHOWN} more" if len(problems) > MAX_PROBLEMS_SHOWN else ""
        rows = sum(item.n_rows for item in loaded)
        raise CorpusError(f"{len(problems)} invalid record(s) of {rows}; the run does not start on bad records:\n  "
                          f"{shown}{more}\nFix them, or set `skip_invalid: true` to skip them (they are counted "
                          "in the run summary).")
    return loaded
