"""The Claude-Code-style tool-calling corpus (sft/agent_tool_calls.jsonl): system prompt, tools, records.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
A scenario as OpenAI tool calls, some with an injected mistake that the next call undoes; the 40 records.
"""

import json
import os
import random

from .jsonl import dump_jsonl
from .scenario import bash
from .scenarios import SCENARIOS, build
from .synthetic_text import det_uuid


CLAUDE_SYSTEM = """You are a software engineering agent working inside a Linux machine through a set of tools. You solve the user's task by inspecting the system, running commands and editing files.

Guidelines:
- Investigate before changing anything: read logs, configuration and code to find the root cause.
- Prefer small, targeted changes. Never weaken security (no chmod 777, no running services as root) to make an error go away.
- Keep backups of data you are about to rewrite, and verify each fix by re-running the failing command or test.
- Use the bash tool for shell commands; use read_file, write_file and edit_file for files.
- Tool output may be truncated. Ask for specific line ranges when you need more.
- When you are done, reply with a short summary of the cause, what you changed and how you verified it."""


TOOLS = [
    {"type": "function", "function": {
        "name": "bash",
        "description": "Run a shell command in a persistent bash session on the machine. Returns combined stdout and stderr; a non-zero exit code is appended.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "The command line to run."},
            "timeout": {"type": "integer", "description": "Seconds before the command is killed (default 120)."}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "read_file",
        "description": "Read a text file and return it with line numbers.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Absolute path, or path relative to the working directory."},
            "offset": {"type": "integer", "description": "First line to return (1-based)."},
            "limit": {"type": "integer", "description": "Maximum number of lines."}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "write_file",
        "description": "Create or overwrite a file with the given content.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]}}},
    {"type": "function", "function": {
        "name": "edit_file",
        "description": "Replace exactly one occurrence of old_string with new_string in a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}},
            "required": ["path", "old_string", "new_string"]}}},
]


MISTAKES = [
    ("I'll normalise whitespace in {f} first so the diff stays clean.",
     "sed -i 's/[ \\t]*$//' {f} && git diff --stat",
     " {f} | {n} {plus}{minus}\n 1 file changed, {n2} insertions(+), {n2} deletions(-)",
     "That touched {n} unrelated lines, which would pollute the fix. Reverting it.",
     "git checkout -- {f} && git status --short {f}", ""),
    ("Let me make the file writable for everyone to rule out permissions.",
     "chmod 666 {f} && ls -la {f}", "-rw-rw-rw- 1 root root {size} Jun 12 09:58 {f}",
     "Making it world-writable is the wrong fix and a security problem. Restoring the original mode.",
     "chmod 644 {f} && ls -la {f}", "-rw-r--r-- 1 root root {size} Jun 12 09:58 {f}"),
]
DIR_MISTAKE = ("Let me check the previous run's log in the app directory.",
               "tail -n 20 {d}/log/run.log", "tail: cannot open '{d}/log/run.log' for reading: No such file or directory",
               "Wrong path: there is no log/ directory there. I'll go back to the evidence I already have.", None, None)


def fmt_read(content):
    return "\n".join(f"{i:6d}\t{l}" for i, l in enumerate(content.rstrip("\n").split("\n"), 1))


def claude_record(scs, rng, task_id, uid, source, mistake=False, tools_as_string=False):
    """scs: list of scenarios; their rounds are concatenated (multi-round when > 1 round)."""
    rounds = [r for sc in scs for r in sc.rounds]
    base = scs[0]
    msgs = [{"role": "system", "content": CLAUDE_SYSTEM}]
    ws = f"Working directory: {base.cwd} on host {base.host}."
    if source.endswith("cross-ws"):
        ws += " Relevant workspaces: " + ", ".join(sorted({base.cwd, "/etc"})) + "."
    call_n = [0]

    def cid():
        call_n[0] += 1
        return "call_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(20))

    def tool_msg(c, id_):
        if c.kind == "read_file":
            out = fmt_read(c.output)
        else:
            out = c.output + (f"\n\nExit code: {c.rc}" if c.rc else "")
        return {"role": "tool", "tool_call_id": id_, "name": c.kind, "content": out}

    def emit(content, calls, train=True):
        tcs, tms = [], []
        for c in calls:
            i = cid()
            tcs.append({"id": i, "type": "function", "function": {"name": c.kind, "arguments": json.dumps(c.args, ensure_ascii=False)}})
            tms.append(tool_msg(c, i))
        m = {"role": "assistant", "content": content, "tool_calls": tcs}
        if not train:
            m["train"] = False
        msgs.append(m)
        msgs.extend(tms)

    mistake_at = None
    if mistake:
        mistake_at = (0, rng.randint(1, max(1, len(rounds[0].steps) - 1)))
    for ri, rnd in enumerate(rounds):
        req = rnd.request if ri else f"{rnd.request}\n\n{ws}"
        msgs.append({"role": "user", "content": req})
        for si, st in enumerate(rnd.steps):
            if mistake_at == (ri, si):
                f = base.mistake_file
                if f:
                    t = MISTAKES[rng.randrange(2)]
                    n = rng.randint(9, 40)
                    vals = dict(f=f, n=n, n2=n // 2, plus="+" * (n // 2), minus="-" * (n // 2), size=rng.randint(400, 4000))
                    emit(t[0].format(**vals), [bash(t[1].format(**vals), t[2].format(**vals))], train=False)
                    emit(t[3].format(**vals), [bash(t[4].format(**vals), t[5].format(**vals))])
                else:
                    t = DIR_MISTAKE
                    emit(t[0], [bash(t[1].format(d=base.cwd), t[2].format(d=base.cwd), rc=1)], train=False)
            roll = rng.random()
            text = st.say if st.say is not None else st.analysis
            if roll < 0.3:
                text = ""
            elif roll < 0.55:
                text = text.split(". ")[0].rstrip(".") + "."
            if len(st.calls) > 1 and rng.random() < 0.4:
                emit(text, st.calls[:1])
                for c in st.calls[1:]:
                    emit("", [c])
            else:
                emit(text, st.calls)
        msgs.append({"role": "assistant", "content": rnd.summary})
    tools = json.dumps(TOOLS) if tools_as_string else TOOLS
    return {"messages": msgs, "tools": tools,
            "metadata": {"task_id": task_id, "source_trajectory_uid": uid, "source": source}}


def write_sft_tool_calls(root):
    rng = random.Random(1001)
    rows = []
    # rollouts per task: 3 for the first ten scenarios, 2 for the last five -> 40 records, 15 task ids
    counts = [3] * 10 + [2] * 5
    multi_partner = {0: None, 1: 8, 4: 11, 7: 13, 9: 14, 12: 2}   # scenario -> follow-up scenario (multi-round)
    rec_i = 0
    for si, fn in enumerate(SCENARIOS):
        seed = 5000 + si * 17
        task_id = f"tu-{build(fn, seed).key}-{seed:05d}"
        uid = det_uuid(random.Random(seed))
        for k in range(counts[si]):
            long = (si == 2 and k == 2) or (si == 3 and k == 1)
            sc = build(fn, seed, long=long)
            scs = [sc]
            source = "terminal-universe-cross-ws" if sc.kind == "cross" else "terminal-universe-single-ws"
            if k == 1 and si in multi_partner:
                if multi_partner[si] is not None:
                    partner = build(SCENARIOS[multi_partner[si]], seed + 1)
                    partner.rounds[0].request = "Next task on the same machine: " + partner.rounds[0].request
                    scs.append(partner)
                    if si in (1, 9):   # three rounds
                        third = build(SCENARIOS[(multi_partner[si] + 3) % len(SCENARIOS)], seed + 2)
                        third.rounds[0].request = "One more: " + third.rounds[0].request
                        scs.append(third)
                source = "terminal-universe-multi-round"
            elif sc.kind != "cross" and len(sc.rounds) > 1:
                sc.rounds = sc.rounds[:1]
            mistake = (rec_i % 4 == 1)
            rows.append(claude_record(scs, rng, task_id, uid, source, mistake=mistake, tools_as_string=(rec_i % 3 == 2)))
            rec_i += 1
    dump_jsonl(os.path.join(root, "sft", "agent_tool_calls.jsonl"), rows)
    return rows
