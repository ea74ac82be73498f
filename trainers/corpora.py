"""Corpus loaders: local JSONL (plain or gzip), Harbor job directories and Hugging Face datasets, in the three
shapes the recipes train on, all converted to chat records (see `records.py`).

- chat: `{"messages": [...], "tools"?, "metadata"?}` (also TRL's conversational `prompt`/`completion`);
- pivot: NeMo Gym / Nemotron terminal-pivot rows, `responses_create_params.input` + `expected_answer` (a JSON
  string), trained as prompt/completion: only the expected answer is in the loss;
- harbor: Harbor trial trajectories (`agent/trajectory.json`, ATIF), converted by `harbor_trajectory.py`.

Every row is validated; a bad one becomes a problem `origin: reason` with origin `file:line`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import CorpusError
from trainers.harbor_trajectory import trajectory_to_chat
from trainers.records import RecordError, normalize_chat, text_content

FORMATS = ("auto", "chat", "pivot", "harbor")


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
        return source


@dataclass
class LoadedSource:
    source: Source
    records: list[dict] = field(default_factory=list)  # {"messages", "tools", "origin", "group", "format"}
    problems: list[str] = field(default_factory=list)  # "file:line: reason"
    n_rows: int = 0
    formats: dict[str, int] = field(default_factory=dict)
    missing_split_key: int = 0


def dotted_get(row: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(row, dict) or part not in row:
            return None
        row = row[part]
    return row


def detect_format(row: Any) -> str:
    if not isinstance(row, dict):
        raise RecordError(f"expected a JSON object, got {type(row).__name__}")
    if "responses_create_params" in row and "expected_answer" in row:
        return "pivot"
    if "steps" in row and "schema_version" in row:
        return "harbor"
    if "messages" in row or ("prompt" in row and "completion" in row):
        return "chat"
    raise RecordError("unknown record shape: expected 'messages' (chat), 'responses_create_params' + "
                      "'expected_answer' (terminal pivot) or an ATIF trajectory ('schema_version', 'steps'); "
                      f"got keys {sorted(row)[:8]}")


def pivot_to_chat(row: dict) -> dict:
    """A terminal-pivot row as prompt/completion: the input is context, the expected answer the only target."""
    params = row.get("responses_create_params")
    items = params.get("input") if isinstance(params, dict) else None
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise RecordError("responses_create_params.input: must be a non-empty list of messages")
    answer = row["expected_answer"]
    if not isinstance(answer, str):
        raise RecordError(f"expected_answer: must be a string (the JSON text of the next action), got "
                          f"{type(answer).__name__}; store it with json.dumps")
    if not answer.strip():
        raise RecordError("expected_answer: empty")
    messages = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise RecordError(f"responses_create_params.input[{index}]: must be a message object")
        if item.get("type", "message") != "message":
            raise RecordError(f"responses_create_params.input[{index}]: item type {item.get('type')!r} is not "
                              "supported for SFT (only messages)")
        message = {"role": item.get("role"), "content": text_content(item.get("content"), f"input[{index}]")}
        if message["role"] == "assistant":
            message["train"] = False
        messages.append(message)
    messages.append({"role": "assistant", "content": answer})
    try:
        return normalize_chat(messages, row.get("tools"))
    except RecordError as err:
        raise RecordError(str(err).replace("messages[", "responses_create_params.input[")) from None


def chat_to_chat(row: dict) -> dict:
    if "messages" in row:
        return normalize_chat(row["messages"], row.get("tools"))
    prompt, completion = row["prompt"], row["completion"]
    if not isinstance(prompt, list) or not isinstance(completion, list):
        raise RecordError("prompt/completion: only the conversational form (lists of messages) is supported")
    context = [dict(m, train=False) if isinstance(m, dict) and m.get("role") == "assistant" else m for m in prompt]
    return normalize_chat(context + completion, row.get("tools"))


CONVERTERS = {"chat": chat_to_chat, "pivot": pivot_to_chat, "harbor": trajectory_to_chat}


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


def _harbor_rows(path: Path) -> Iterator[tuple[str, Any]]:
    files = [path] if path.is_file() else sorted(path.rglob("agent/trajectory.json"))
    if not files:
        raise FileNotFoundError(f"{path}: no Harbor trajectories (agent/trajectory.json) under this directory")
    for file in files:
        origin = f"{file}:1"
        try:
            row = json.loads(file.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            yield origin, RecordError("not valid UTF-8")
            continue
        except json.JSONDecodeError as err:
            yield origin, RecordError(f"invalid JSON: {err.msg} (line {err.lineno}, column {err.colno})")
            continue
        if isinstance(row, dict):  # the trial's names become split keys: metadata.task_id, .source_trajectory_uid
            trial_dir = file.parent.parent
            trial = _read_json(trial_dir / "result.json")
            row.setdefault("metadata", {
                "task_id": trial.get("task_name") or trial_dir.name.split("__")[0],
                "source_trajectory_uid": trial.get("trial_name") or trial_dir.name,
                "reward": ((trial.get("verifier_result") or {}).get("rewards") or {}).get("reward"),
            })
        yield origin, row


def _hub_rows(source: Source) -> Iterator[tuple[str, Any]]:
    import datasets

    try:
        dataset = datasets.load_dataset(source.path, source.name, split=source.split, data_files=source.data_files)
    except Exception as err:  # the hub client raises many types; the user needs the name and the cause
        raise FileNotFoundError(f"{source.path}: not a local file and not loadable as a Hugging Face dataset "
                                f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})") from None
    for index, row in enumerate(dataset):
        yield f"{source.path}[{source.split}]:{index}", row


def iter_rows(source: Source) -> Iterator[tuple[str, Any]]:
    """(origin, row) pairs; a row that cannot be parsed comes as a RecordError."""
    path = Path(source.path)
    if path.is_dir() or path.name == "trajectory.json":
        yield from _harbor_rows(path)
    elif path.is_file():
        if path.suffix in (".json",) and not path.name.endswith(".jsonl"):
            yield from _harbor_rows(path)
        else:
            yield from _jsonl_rows(path)
    elif path.suffix in (".jsonl", ".gz", ".json") or source.path.startswith((".", "/")):
        raise FileNotFoundError(f"{source.path}: no such file")
    else:
        yield from _hub_rows(source)


def load_source(source: Source, split_key: str) -> LoadedSource:
    """Read, convert and validate every row of one source."""
    loaded = LoadedSource(source)
    key = source.split_key or split_key
    for origin, row in iter_rows(source):
        loaded.n_rows += 1
        try:
            if isinstance(row, RecordError):
                raise row
            fmt = detect_format(row) if source.format == "auto" else source.format
            record = CONVERTERS[fmt](row)
        except RecordError as err:
            loaded.problems.append(f"{origin}: {err}")
            continue
        except (KeyError, TypeError, AttributeError) as err:  # a row of the wrong shape for a forced format
            loaded.problems.append(f"{origin}: not a {source.format} record ({type(err).__name__}: {err})")
            continue
        group = dotted_get(row, key)
        if group is None:
            loaded.missing_split_key += 1
            group = origin
        record.update(origin=origin, group=str(group), format=fmt)
        loaded.formats[fmt] = loaded.formats.get(fmt, 0) + 1
        loaded.records.append(record)
    return loaded
