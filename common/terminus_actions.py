"""Terminus actions as NeMo Gym's terminus_judge reads them: the schemas (OpenAPI 3.0, keyed by `metadata.harness`).
Runs in: the training venv (openapi-schema-validator): the reward server's terminus_judge and the pivot-row builder.

terminus_1 and terminus_2; both forbid extra keys at the top level and inside each command. `keystrokes` is what the
similarity compares, each side cut to MAX_SIMILARITY_CHARS.
The fields: docs/reward-server.md#the-environments-check-by-check.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from jsonschema.exceptions import best_match
from openapi_schema_validator import OAS31Validator

# each side of the keystroke similarity is cut to this (the reward server's default `max_similarity_chars`: difflib's
# cost bound); the pivot-row builder leaves out actions with more keystrokes, whose score would see only a prefix
MAX_SIMILARITY_CHARS = 3000

TERMINUS_1_SCHEMA = {
    "title": "CommandBatchResponse",
    "type": "object",
    "additionalProperties": False,
    "definitions": {
        "Command": {
            "title": "Command",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "keystrokes": {"title": "Keystrokes", "type": "string"},
                "is_blocking": {"title": "Is Blocking", "type": "boolean"},
                "timeout_sec": {"title": "Timeout Sec", "type": "number"},
            },
            "required": ["keystrokes", "is_blocking", "timeout_sec"],
        }
    },
    "properties": {
        "state_analysis": {"title": "State Analysis", "type": "string"},
        "explanation": {"title": "Explanation", "type": "string"},
        "commands": {"title": "Commands", "type": "array", "items": {"$ref": "#/definitions/Command"}},
        "is_task_complete": {"title": "Is Task Complete", "type": "boolean"},
    },
    "required": ["state_analysis", "explanation", "commands", "is_task_complete"],
}

TERMINUS_2_SCHEMA = {
    "title": "CommandBatchResponse",
    "type": "object",
    "additionalProperties": False,
    "definitions": {
        "Command": {
            "title": "Command",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "keystrokes": {"title": "Keystrokes", "type": "string"},
                "duration": {"title": "Duration", "type": "number", "default": 1.0},
            },
            "required": ["keystrokes"],
        }
    },
    "properties": {
        "analysis": {"title": "Analysis", "type": "string"},
        "plan": {"title": "Plan", "type": "string"},
        "commands": {"title": "Commands", "type": "array", "items": {"$ref": "#/definitions/Command"}},
        "task_complete": {"title": "Task Complete", "type": "boolean", "default": False},
    },
    "required": ["analysis", "plan", "commands"],
}

SCHEMAS = {"terminus_1": TERMINUS_1_SCHEMA, "terminus_2": TERMINUS_2_SCHEMA}

for _schema in SCHEMAS.values():
    OAS31Validator.check_schema(_schema)
VALIDATORS = {harness: OAS31Validator(schema) for harness, schema in SCHEMAS.items()}


def schema_errors(instance: Any, harness: str) -> Optional[str]:
    """`openapi_schema_validator.validate(instance, schema)` without rebuilding the validator: the best error."""
    error = best_match(VALIDATORS[harness].iter_errors(instance))
    return None if error is None else error.message


def answer_text(text: str) -> str:
    """A response as terminus_judge reads it: the text after the last `</think>`, stripped."""
    return text.split("</think>")[-1].strip()


def json_object(text: str) -> Optional[dict]:
    """`json.loads` of the whole text when it is a JSON object (no extraction), else None (too deep to parse: None)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def keystrokes(action: dict) -> list[str]:
    """The keystrokes of an action's commands, in order (what the similarity joins and compares)."""
    return [cmd.get("keystrokes", "") for cmd in action.get("commands", []) if "keystrokes" in cmd]
