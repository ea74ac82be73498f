"""common/harnesses.py is the one table of harnesses: no other module lists them, everything that names the harnesses
derives from it (eval agents, Harbor's `-a`, the episode server's calls), and every entry refuses an unknown name
with the list."""

import ast
import subprocess
import sys

import pytest

from common.harnesses import BASH_TOOL_HARNESS, HARNESSES, TERMINUS_2_HARNESS, UnknownHarness, harness_named
from conftest import REPO

# the packages and entry points (tests and the sample data's generator stand outside: they name harnesses as data)
SOURCES = [p for top in ("common", "sandbox", "harbor_tasks", "rewards", "chat_corpus", "episodes", "modeling", "eval",
                         "harbor_plugins", "trainers", "recipes", "bench")
           for p in sorted((REPO / top).rglob("*.py")) if "/tasks/" not in p.relative_to(REPO).as_posix()]


def _module_level_tables(source: str, shown: str) -> list[str]:
    """`NAME = ...` at module level whose value holds the names of two or more harnesses as string literals."""
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            named = {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and c.value in HARNESSES}
            if len(named) >= 2:
                found.append(f"{shown}:{node.lineno}: {ast.unparse(node)[:100]}")
    return found


def test_no_other_module_lists_the_harnesses():
    """Before the table, recipes/learn.py, trainers/agentic.py, episodes/__init__.py and eval/settings.py (twice)
    listed them."""
    tables = [t for path in SOURCES if path != REPO / "common" / "harnesses.py"
              for t in _module_level_tables(path.read_text(), str(path.relative_to(REPO)))]
    assert not tables, "harnesses listed outside common/harnesses.py:\n" + "\n".join(tables)


def test_the_check_finds_a_table():
    assert _module_level_tables('AGENTS = ("terminus-2", "bash-tool", "nop")\nA = "bash-tool"\n', "x.py") == [
        "x.py:1: AGENTS = ('terminus-2', 'bash-tool', 'nop')"]
    assert _module_level_tables(
        'HARNESS_CALLS = {"bash-tool": (BASH,), "terminus-2": (FIRST, STEP)}\n', "x.py")


def test_the_table_names_each_harness_by_its_key():
    assert set(HARNESSES) == {BASH_TOOL_HARNESS, TERMINUS_2_HARNESS}
    for name, harness in HARNESSES.items():
        assert harness.name == name and harness.acts and harness.parsed_by and harness.eval_agent
        assert harness.episode_calls and all(call.startswith("/") for call in harness.episode_calls)
    calls = [call for harness in HARNESSES.values() for call in harness.episode_calls]
    assert len(calls) == len(set(calls)), "a call acts in one harness"


def test_the_eval_agents_and_harbors_agent_derive_from_it(tmp_path):
    from eval.run import harbor_command
    from eval.settings import AGENTS, MODEL_AGENTS, EvalSettings

    assert MODEL_AGENTS == tuple(HARNESSES) and set(AGENTS) == {*HARNESSES, "oracle", "nop"}
    for name, harness in HARNESSES.items():
        try:
            command = harbor_command(EvalSettings(suite="builtin:terminal", agent=name), "job", tmp_path)
        except Exception as err:  # no .venv-harbor here: harbor_command says so before it builds the command
            pytest.skip(str(err))
        assert command[command.index("-a") + 1] == harness.eval_agent


def test_the_episode_server_serves_each_harness_calls():
    from episodes import BASH, TERMINUS_FIRST, TERMINUS_STEP
    from episodes.app import EpisodeServerConfig, create_app

    assert HARNESSES[BASH_TOOL_HARNESS].episode_calls == (BASH,)
    assert HARNESSES[TERMINUS_2_HARNESS].episode_calls == (TERMINUS_FIRST, TERMINUS_STEP)
    routes = {route.path for route in create_app(EpisodeServerConfig(tasks=[REPO])).routes}
    assert {call for harness in HARNESSES.values() for call in harness.episode_calls} <= routes


def test_an_unknown_harness_is_refused_with_the_list_everywhere(tmp_path):
    from common.errors import RequestError
    from episodes.sessions import EpisodeSessions
    from trainers.agentic import AgenticTaskArguments

    listed = f"is not one of {', '.join(HARNESSES)}"
    with pytest.raises(UnknownHarness, match=f"^harness: 'xml' {listed}$"):
        harness_named("xml")
    with pytest.raises(ValueError, match=f"harness: 'xml' {listed}"):
        AgenticTaskArguments(harness="xml")
    with pytest.raises(RequestError, match=f"harness: 'xml' {listed}") as refused:
        EpisodeSessions([tmp_path]).seed("any-task", harness="xml")
    assert refused.value.status == 422
    for command in (["-m", "eval.run", "--checkpoint", str(tmp_path), "--suite", "builtin:terminal", "--agent", "xml"],
                    ["-m", "eval.scripted_teacher", "--tasks", str(tmp_path), "--agent", "xml"]):
        run = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert run.returncode == 2 and "invalid choice: 'xml'" in run.stderr and all(
            f"'{name}'" in run.stderr for name in HARNESSES), run.stderr
