"""The Terminus action schemas NeMo Gym's terminus_judge validates against (OpenAPI 3.0), keyed by `metadata.harness`.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

terminus_1 and terminus_2; both forbid extra keys at the top level and inside each command.
The fields: docs/reward-server.md#the-environments-check-by-check.
"""

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
