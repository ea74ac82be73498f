#!/usr/bin/env python3
"""Validate the sample corpora in data/ (stdlib only). Exit 1 on any problem.

Checks: every line parses; tool-call arguments are JSON strings; every tool message answers an
earlier tool_call_id; Terminus actions parse with the right keys; pivot inputs alternate roles
and end on a user turn; expected_answer parses; Harbor ATIF files have sequential step ids and
observation source_call_ids that name a tool call of the same step; the OpenThoughts-Agent, ShareGPT and
JSON-string rows keep their shapes (roles or `from` names, turn order, parsable JSON strings).
"""
import glob
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
errors = []
T2_KEYS = ["analysis", "plan", "commands", "task_complete"]
T1_KEYS = ["state_analysis", "explanation", "commands", "is_task_complete"]


def err(where, msg):
    errors.append(f"{where}: {msg}")


def load(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            try:
                rows.append((i, json.loads(line)))
            except json.JSONDecodeError as e:
                err(f"{path}:{i}", f"bad JSON: {e}")
    return rows


def check_action(where, text, harness):
    try:
        a = json.loads(text)
    except json.JSONDecodeError as e:
        return err(where, f"action is not JSON: {e}")
    keys = T2_KEYS if harness == "terminus_2" else T1_KEYS
    if list(a) != keys:
        err(where, f"action keys {list(a)} != {keys}")
    for c in a.get("commands", []):
        if "keystrokes" not in c:
            err(where, "command without keystrokes")
    return a


def stats(name, lens):
    print(f"  {name}: n={len(lens)} chars min={min(lens)} median={int(statistics.median(lens))} mean={int(statistics.mean(lens))} max={max(lens)}")


def check_tool_calls():
    path = os.path.join(ROOT, "sft", "agent_tool_calls.jsonl")
    rows = load(path)
    lens, turns, ids, sources = [], [], set(), {}
    n_str_tools = n_train_false = 0
    for i, r in rows:
        w = f"{path}:{i}"
        msgs = r["messages"]
        tools = r["tools"]
        if isinstance(tools, str):
            n_str_tools += 1
            tools = json.loads(tools)
        names = {t["function"]["name"] for t in tools}
        if msgs[0]["role"] != "system" or msgs[1]["role"] != "user":
            err(w, "must start with system, user")
        pending = set()
        for j, m in enumerate(msgs):
            if m["role"] == "assistant":
                for tc in m.get("tool_calls", []):
                    if not isinstance(tc["function"]["arguments"], str):
                        err(w, f"msg {j}: arguments not a string")
                        continue
                    json.loads(tc["function"]["arguments"])
                    if tc["function"]["name"] not in names:
                        err(w, f"msg {j}: unknown tool {tc['function']['name']}")
                    pending.add(tc["id"])
            elif m["role"] == "tool":
                if m["tool_call_id"] not in pending:
                    err(w, f"msg {j}: tool message answers unknown id {m['tool_call_id']}")
                pending.discard(m["tool_call_id"])
        if pending:
            err(w, f"unanswered tool calls {pending}")
        last = msgs[-1]
        if last["role"] != "assistant" or last.get("tool_calls"):
            err(w, "must end with a plain assistant message")
        n_asst = sum(m["role"] == "assistant" for m in msgs)
        if not 4 <= n_asst <= 20:
            err(w, f"{n_asst} assistant messages")
        n_train_false += any(m.get("train") is False for m in msgs)
        turns.append(n_asst)
        lens.append(len(json.dumps(r, ensure_ascii=False)))
        ids.add(r["metadata"]["task_id"])
        sources[r["metadata"]["source"]] = sources.get(r["metadata"]["source"], 0) + 1
    print(f"{path}: {len(rows)} records, {len(ids)} task ids, sources {sources}, tools-as-string {n_str_tools}, with train:false {n_train_false}, assistant turns {min(turns)}-{max(turns)}")
    stats("record length", lens)


def check_terminus_chat():
    path = os.path.join(ROOT, "sft", "terminus2_chat.jsonl")
    rows = load(path)
    lens = []
    for i, r in rows:
        w = f"{path}:{i}"
        msgs = r["messages"]
        for j, m in enumerate(msgs):
            if m["role"] != ("user" if j % 2 == 0 else "assistant"):
                err(w, f"msg {j}: role {m['role']} breaks alternation")
            if m["role"] == "assistant":
                a = check_action(f"{w} msg {j}", m["content"], "terminus_2")
        if msgs[-1]["role"] != "assistant" or not (a or {}).get("task_complete"):
            err(w, "last action must have task_complete true")
        lens.append(len(json.dumps(r, ensure_ascii=False)))
    print(f"{path}: {len(rows)} records")
    stats("record length", lens)


def check_pivots():
    path = os.path.join(ROOT, "pivot", "terminal_pivot.jsonl")
    rows = load(path)
    lens, trajs, harn = [], set(), {}
    for i, r in rows:
        w = f"{path}:{i}"
        inp = r["responses_create_params"]["input"]
        md = r["metadata"]
        for j, m in enumerate(inp):
            if m["role"] != ("user" if j % 2 == 0 else "assistant"):
                err(w, f"input {j}: role {m['role']} breaks alternation")
            if m["role"] == "assistant":
                check_action(f"{w} input {j}", m["content"], md["harness"])
        if inp[-1]["role"] != "user":
            err(w, "input must end with a user message")
        if not isinstance(r["expected_answer"], str):
            err(w, "expected_answer must be a string")
        else:
            check_action(w + " expected_answer", r["expected_answer"], md["harness"])
        if md["category"] != ("first_round" if len(inp) == 1 else "others"):
            err(w, "wrong category")
        if md["pivot_agent_turn_index"] != (len(inp) - 1) // 2:
            err(w, "pivot_agent_turn_index does not match the prefix")
        if not r["uuid"].endswith(f"-{md['pivot_agent_turn_index'] + 1}"):
            err(w, "uuid suffix")
        trajs.add(md["source_trajectory_uid"])
        harn[md["harness"]] = harn.get(md["harness"], 0) + 1
        lens.append(sum(len(m["content"]) for m in inp))
    print(f"{path}: {len(rows)} rows from {len(trajs)} trajectories, harness {harn}, threshold on {sum('threshold' in r for _, r in rows)}")
    stats("prompt length", lens)


def check_harbor():
    job = os.path.join(ROOT, "harbor", "sample-job")
    for f in ("config.json", "result.json"):
        json.load(open(os.path.join(job, f)))
    trials = sorted(d for d in glob.glob(os.path.join(job, "*__*")) if os.path.isdir(d))
    for t in trials:
        res = json.load(open(os.path.join(t, "result.json")))
        if res["trial_name"] != os.path.basename(t):
            err(t, "trial_name mismatch")
        traj = json.load(open(os.path.join(t, "agent", "trajectory.json")))
        if list(traj)[:4] != ["schema_version", "session_id", "agent", "steps"]:
            err(t, f"top-level keys {list(traj)}")
        for k, s in enumerate(traj["steps"], 1):
            if s["step_id"] != k:
                err(t, f"step {k} has step_id {s['step_id']}")
            if s["source"] != "agent" and any(x in s for x in ("tool_calls", "metrics", "model_name")):
                err(t, f"step {k}: agent-only field on a {s['source']} step")
            ids = {c["tool_call_id"] for c in s.get("tool_calls", [])}
            for o in s.get("observation", {}).get("results", []):
                if o.get("source_call_id") is not None and o["source_call_id"] not in ids:
                    err(t, f"step {k}: source_call_id {o['source_call_id']} not in tool_calls")
        print(f"  {os.path.basename(t)}: reward={res['verifier_result']['rewards']['reward']} steps={len(traj['steps'])} "
              f"exception={(res['exception_info'] or {}).get('exception_type')}")
    print(f"{job}: {len(trials)} trials")


def check_terminus_conversations():
    path = os.path.join(ROOT, "sft", "terminus2_conversations.jsonl")
    rows = load(path)
    for i, r in rows:
        w = f"{path}:{i}"
        conv = r["conversations"]
        for j, m in enumerate(conv):
            if list(m) != ["content", "role"] or m["role"] != ("user" if j % 2 == 0 else "assistant"):
                err(w, f"turn {j}: must be {{content, role}} alternating user/assistant")
            elif m["role"] == "assistant":
                check_action(f"{w} turn {j}", m["content"], "terminus_2")
        if conv[-1]["role"] != "assistant":
            err(w, "must end with an assistant turn")
        if r["episode"] != f"episode-{len(conv) // 2 - 1}":
            err(w, f"episode {r['episode']} does not match {len(conv) // 2} assistant turns")
        if not r["trial_name"].startswith(r["task"] + "__"):
            err(w, "trial_name must be <task>__<id>")
    print(f"{path}: {len(rows)} rows from {len({r['trial_name'] for _, r in rows})} trials")


def check_sharegpt():
    path = os.path.join(ROOT, "sft", "sharegpt_tool_calls.jsonl")
    rows = load(path)
    for i, r in rows:
        w = f"{path}:{i}"
        conv = r["conversations"]
        names = {t["name"] for t in json.loads(r["tools"])}
        calls = 0
        for j, m in enumerate(conv):
            if m["from"] == "function_call":
                call = json.loads(m["value"])
                calls = 1
                if call["name"] not in names or not isinstance(call["arguments"], dict):
                    err(w, f"turn {j}: bad function_call {m['value'][:60]}")
            elif m["from"] in ("observation", "tool"):
                if not calls:
                    err(w, f"turn {j}: {m['from']} answers no function_call")
                calls = 0
            elif m["from"] not in ("system", "human", "user", "gpt", "assistant"):
                err(w, f"turn {j}: unknown from {m['from']!r}")
        if conv[-1]["from"] not in ("gpt", "assistant"):
            err(w, "must end with a gpt/assistant turn")
    print(f"{path}: {len(rows)} rows, {sum('system' in r for _, r in rows)} with a system column")


def check_swe_json_strings():
    path = os.path.join(ROOT, "sft", "swe_json_strings.jsonl")
    rows = load(path)
    for i, r in rows:
        w = f"{path}:{i}"
        if not isinstance(r["messages"], str):
            err(w, "messages must be a JSON string")
            continue
        msgs = json.loads(r["messages"])
        tools = json.loads(r["tools"]) if isinstance(r["tools"], str) else [json.loads(t) for t in r["tools"]]
        if {t["function"]["name"] for t in tools} != {"bash", "read_file", "write_file", "edit_file"}:
            err(w, "tools")
        pending = set()
        for j, m in enumerate(msgs):
            pending |= {tc["id"] for tc in m.get("tool_calls", [])}
            if m["role"] == "tool" and m["tool_call_id"] not in pending:
                err(w, f"msg {j}: tool message answers unknown id {m['tool_call_id']}")
    print(f"{path}: {len(rows)} rows, tools as a list of JSON strings on {sum(isinstance(r['tools'], list) for _, r in rows)}")


if __name__ == "__main__":
    check_tool_calls()
    check_terminus_chat()
    check_pivots()
    check_harbor()
    check_terminus_conversations()
    check_sharegpt()
    check_swe_json_strings()
    if errors:
        print("\n".join(errors[:50]))
        print(f"{len(errors)} problems")
        sys.exit(1)
    print("all checks passed")
