"""Resume and recipe-key edge cases: a checkpoint whose trainer_state.json is empty or cut short is not complete;
`--eval_suites '[]'` (or a JSON/YAML list string) is a list, not a suite named `[]`."""

import json

import pytest

from common.checkpoints import last_complete_checkpoint
from trainers.eval_callback import EvalArguments


def _checkpoint(root, step, state):
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if state is not None:
        (path / "trainer_state.json").write_text(state)
    return path


@pytest.mark.parametrize("broken", ["", '{"global_step": 4, "log_hist', "[]", '{"epoch": 1.0}', "null",
                                    '{"global_step": "4"}'])
def test_a_truncated_trainer_state_is_not_a_complete_checkpoint(tmp_path, broken):
    good = _checkpoint(tmp_path, 2, json.dumps({"global_step": 2, "log_history": []}))
    _checkpoint(tmp_path, 4, broken)
    _checkpoint(tmp_path, 6, None)  # killed before trainer_state.json
    assert last_complete_checkpoint(tmp_path) == str(good)


def test_no_complete_checkpoint_at_all(tmp_path):
    _checkpoint(tmp_path, 4, "")
    assert last_complete_checkpoint(tmp_path) is None


@pytest.mark.parametrize("value, expected", [
    ("[]", []), (" [ ] ", []), ("", []), (["[]"], []),
    ('["builtin:terminal"]', ["builtin:terminal"]),
    ("[builtin:terminal, tests/fixtures]", ["builtin:terminal", "tests/fixtures"]),
    (["[builtin:terminal,", "builtin:evocode]"], ["builtin:terminal", "builtin:evocode"]),  # nargs split
    ("builtin:terminal,builtin:evocode", ["builtin:terminal", "builtin:evocode"]),
    (["builtin:terminal", "tests/fixtures"], ["builtin:terminal", "tests/fixtures"]),
])
def test_eval_suites_accepts_an_empty_or_json_list(value, expected):
    assert EvalArguments(eval_suites=value).eval_suites == expected


def test_eval_suites_list_of_non_strings_is_one_clear_error():
    with pytest.raises(ValueError, match="eval_suites"):
        EvalArguments(eval_suites='[{"a": 1}]')
