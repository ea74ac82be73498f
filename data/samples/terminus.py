"""Terminus-1/2 renderings of a scenario, and the corpora made of them: the Terminus-2 chat and the pivot rows.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
Prompts, JSON actions, terminal screens, episodes and chat messages; sft/terminus2_chat.jsonl and
pivot/terminal_pivot.jsonl.
"""

import json
import os
import random

from .jsonl import dump_jsonl
from .scenario import Call, Scenario
from .scenarios import SCENARIOS, build
from .synthetic_text import det_uuid


T2_PROMPT = """You are an AI assistant tasked with solving command-line tasks in a Linux environment. You will be given a task description and the output from previously executed commands. Your goal is to solve the task by providing batches of shell commands.

Format your response as JSON with the following structure:

{{
  "analysis": "Analyze the current state based on the terminal output provided. What do you see? What has been accomplished? What still needs to be done?",
  "plan": "Describe your plan for the next steps. What commands will you run and why? Be specific about what you expect each command to accomplish.",
  "commands": [
    {{
      "keystrokes": "ls -la\\n",
      "duration": 0.1
    }},
    {{
      "keystrokes": "cd project\\n",
      "duration": 0.1
    }}
  ],
  "task_complete": true
}}

Required fields:
- "analysis": Your analysis of the current situation
- "plan": Your plan for the next steps
- "commands": Array of command objects to execute

Optional fields:
- "task_complete": Boolean indicating if the task is complete (defaults to false if not present)

Command object structure:
- "keystrokes": String containing the exact keystrokes to send to the terminal (required)
- "duration": Number of seconds to wait for the command to complete before the next command will be executed (defaults to 1.0 if not present)

IMPORTANT: The text inside "keystrokes" will be used completely verbatim as keystrokes. Write commands exactly as you want them sent to the terminal:
- Most bash commands should end with a newline (\\n) to cause them to execute
- For special key sequences, use tmux-style escape sequences:
  - C-c for Ctrl+C
  - C-d for Ctrl+D

The "duration" attribute specifies the number of seconds to wait for the command to complete (default: 1.0) before the next command will be executed. On immediate tasks (e.g., cd, ls, echo, cat) set a duration of 0.1 seconds. On commands (e.g., gcc, find, rustc) set a duration of 1.0 seconds. On slow commands (e.g., make, python3 [long running script], wget [file]) set an appropriate duration as you determine necessary.

It is better to set a smaller duration than a longer duration. It is always possible to wait again if the prior output has not finished, by running {{"keystrokes": "", "duration": 10.0}} on subsequent requests to wait longer. Never wait longer than 60 seconds; prefer to poll to see intermediate result status.

Important notes:
- Each command's keystrokes are sent exactly as written to the terminal
- Do not include extra whitespace before or after the keystrokes unless it's part of the intended command
- Extra text before or after the JSON will generate warnings but be tolerated
- The JSON must be valid - use proper escaping for quotes and special characters within strings
- Commands array can be empty if you want to wait without taking action

Task Description:
{instruction}

Current terminal state:
{terminal_state}
"""


T1_PROMPT = """You are an AI assistant tasked with solving command-line tasks in a Linux environment. You will be given a task instruction and the output from previously executed commands. Your goal is to solve the task by providing batches of shell commands.

For each response:
1. Analyze the current state based on any terminal output provided
2. Determine the next set of commands needed to make progress
3. Decide if you need to see the output of these commands before proceeding

Instruction:
{instruction}

Your response must be a JSON object that matches this schema:

{{
  "state_analysis": "Description of the current state of the terminal",
  "explanation": "Brief explanation of what these commands will do",
  "commands": [
    {{
      "keystrokes": "Keystrokes to execute in the terminal. Use tmux-style escape sequences for modifier keys (e.g. C-c for ctrl-c).",
      "is_blocking": "Whether to wait for and return the terminal output after executing these keystrokes. Set to false for interactive programs (vim, less, a REPL) that never return to the prompt.",
      "timeout_sec": "The number of expected seconds to wait for the command to complete."
    }}
  ],
  "is_task_complete": "Whether the task is complete following the execution of these commands."
}}

Don't include markdown formatting.

Note that you operate directly on the terminal. If you would like to execute a command that you have written you will need to append a newline character to the end of your command.

For example, if you write "ls -la" you will need to append a newline character to the end of your command like this: `ls -la\\n`.

One thing to be very careful about is handling interactive sessions like less, vim, or git diff. In these cases, you should not wait for the output of the command. Instead, you should send the keystrokes to the terminal as if you were typing them.

The current terminal state is:
{terminal_state}
"""


CONFIRM = ("Are you sure you want to mark the task as complete? This will trigger your solution to be graded and you won't be able "
           "to make any further corrections. If so, include \"task_complete\": true in your JSON response again.")


def call_to_keystrokes(c: Call) -> str:
    if c.kind == "bash":
        return c.args["command"] + "\n"
    if c.kind == "read_file":
        return f"cat {c.args['path']}\n"
    if c.kind == "write_file":
        body = c.args["content"] if c.args["content"].endswith("\n") else c.args["content"] + "\n"
        return f"cat > {c.args['path']} <<'EOF'\n{body}EOF\n"
    if c.kind == "edit_file":
        return ("python3 - <<'EOF'\nimport pathlib\n"
                f"p = pathlib.Path({c.args['path']!r})\ns = p.read_text()\n"
                f"old = {c.args['old_string']!r}\nassert s.count(old) == 1, s.count(old)\n"
                f"p.write_text(s.replace(old, {c.args['new_string']!r}))\nEOF\n")
    raise ValueError(c.kind)


def screen_output(c: Call) -> str:
    if c.kind in ("bash", "read_file"):
        return c.output
    return ""


def limit_output(text, limit=10000):
    b = text.encode()
    if len(b) <= limit:
        return text
    half = limit // 2
    head = b[:half].decode(errors="ignore")
    tail = b[-half:].decode(errors="ignore")
    return f"{head}\n[... output limited to {limit} bytes; {len(b) - 2 * half} interior bytes omitted ...]\n{tail}"


def render_screen(sc: Scenario, calls) -> str:
    prompt = f"root@{sc.host}:{sc.cwd}# "
    parts = []
    for c in calls:
        ks = call_to_keystrokes(c).rstrip("\n").split("\n")
        parts.append(prompt + ks[0])
        parts += ["> " + l for l in ks[1:]]
        out = screen_output(c)
        if out:
            parts.append(out)
    parts.append(prompt)
    return "\n".join(parts)


def t2_action(analysis, plan, commands, complete=False):
    return json.dumps({"analysis": analysis, "plan": plan, "commands": commands, "task_complete": complete}, indent=2, ensure_ascii=False)


def t1_action(analysis, plan, commands, complete=False):
    return json.dumps({"state_analysis": analysis, "explanation": plan,
                       "commands": [{"keystrokes": c["keystrokes"], "is_blocking": True,
                                     "timeout_sec": max(1, int(round(c["duration"] * 3)))} for c in commands],
                       "is_task_complete": complete}, indent=4, ensure_ascii=False)


def initial_screen(sc):
    return f"root@{sc.host}:{sc.cwd}# \n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n"


def terminus_episodes(sc: Scenario, rng, confirm=False):
    """-> list of episodes: dict(analysis, plan, commands, complete, observation)."""
    eps = []
    rnd = sc.rounds[0]
    for st in rnd.steps:
        cmds = [{"keystrokes": call_to_keystrokes(c), "duration": round(min(max(c.duration, 0.1), 10.0), 1)} for c in st.calls]
        obs = limit_output(render_screen(sc, st.calls))
        eps.append(dict(analysis=st.analysis, plan=st.plan, commands=cmds, complete=False, observation=obs, calls=st.calls))
    done_obs = f"root@{sc.host}:{sc.cwd}# "
    eps.append(dict(analysis=rnd.summary, plan="The task is complete; no further commands are needed.", commands=[],
                    complete=True, observation=done_obs, calls=[]))
    if confirm:
        eps.append(dict(analysis="I re-checked the results above: the fix is in place and verified. Confirming completion.",
                        plan="No further commands.", commands=[], complete=True, observation=done_obs, calls=[]))
    return eps


def terminus_messages(sc, rng, harness="terminus_2", confirm=False):
    eps = terminus_episodes(sc, rng, confirm)
    tmpl = T2_PROMPT if harness == "terminus_2" else T1_PROMPT
    msgs = [{"role": "user", "content": tmpl.format(instruction=sc.rounds[0].request, terminal_state=initial_screen(sc))}]
    act = t2_action if harness == "terminus_2" else t1_action
    for i, e in enumerate(eps):
        msgs.append({"role": "assistant", "content": act(e["analysis"], e["plan"], e["commands"], e["complete"])})
        if i == len(eps) - 1:
            break
        if e["complete"]:
            msgs.append({"role": "user", "content": f"Current terminal state:\n{e['observation']}\n\n{CONFIRM}"})
        elif harness == "terminus_2":
            msgs.append({"role": "user", "content": "New Terminal Output:\n\n" + e["observation"]})
        else:
            msgs.append({"role": "user", "content": e["observation"]})
    return msgs, eps


def write_terminus_chat(root):
    rows = []
    for i in range(25):
        fn = SCENARIOS[i % len(SCENARIOS)]
        seed = 7000 + i * 31
        sc = build(fn, seed)
        msgs, _ = terminus_messages(sc, random.Random(seed), confirm=(i % 6 == 3))
        rows.append({"messages": msgs, "metadata": {"task_id": f"t2-{sc.key}-{seed:05d}", "source_trajectory_uid": det_uuid(random.Random(seed + 1)),
                                                    "source": "terminus-2", "harness": "terminus_2"}})
    dump_jsonl(os.path.join(root, "sft", "terminus2_chat.jsonl"), rows)
    return rows


def write_pivots(root):
    rows = []
    rng = random.Random(4242)
    plan = [(SCENARIOS[i], "terminus_2") for i in range(12)] + [(SCENARIOS[12], "terminus_1"), (SCENARIOS[13], "terminus_1")]
    for ti, (fn, harness) in enumerate(plan):
        seed = 9000 + ti * 13
        sc = build(fn, seed)
        msgs, _ = terminus_messages(sc, random.Random(seed), harness=harness, confirm=(ti % 4 == 1))
        traj_uid = det_uuid(random.Random(seed + 7))
        base_uuid = det_uuid(random.Random(seed + 8))
        agent_idx = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        if harness == "terminus_1":
            picks = agent_idx[:3] if ti == len(plan) - 2 else agent_idx[:2]
        else:
            n = min(len(agent_idx), rng.choice([4, 4, 5]))
            picks = sorted(set([agent_idx[0]] + rng.sample(agent_idx[1:], n - 1)))
        for p in picks:
            turn = agent_idx.index(p)
            prefix = msgs[:p]
            row = {"responses_create_params": {"input": prefix},
                   "expected_answer": msgs[p]["content"],
                   "uuid": f"{base_uuid}-{turn + 1}",
                   "metadata": {"harness": harness, "category": "first_round" if len(prefix) == 1 else "others",
                                "source_trajectory_uid": traj_uid, "pivot_agent_turn_index": turn, "task": f"{sc.key}-{seed:05d}"},
                   "agent_ref": {"type": "responses_api_agents", "name": "terminus_judge_simple_agent"}}
            if len(rows) % 3 == 0:
                row["threshold"] = 0.95
                row = {k: row[k] for k in ["responses_create_params", "expected_answer", "uuid", "metadata", "threshold", "agent_ref"]}
            rows.append(row)
    dump_jsonl(os.path.join(root, "pivot", "terminal_pivot.jsonl"), rows)
    return rows
