"""The scenarios in the shapes of public agent SFT sets: OpenThoughts-Agent rows, ShareGPT, JSON strings.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
sft/terminus2_conversations.jsonl (Terminus-2 trials as Harbor exports them), sft/sharegpt_tool_calls.jsonl
(LLaMA-Factory's ShareGPT tool calling), sft/swe_json_strings.jsonl (SWE trajectories with JSON-string fields).
"""

import json
import os
import random
from datetime import datetime, timedelta, timezone

from .jsonl import dump_jsonl
from .scenarios import SCENARIOS, build
from .synthetic_text import det_uuid, hexid, rid
from .terminus import terminus_messages
from .tool_calls import CLAUDE_SYSTEM, TOOLS, claude_record, fmt_read


def write_terminus_conversations(root):
    """OpenThoughts-Agent SFT rows (Terminus-2 trials exported by Harbor): `conversations` of {content, role}
    plus the trial's metadata as top-level columns; two trials are also exported at an earlier episode."""
    rows = []
    rng = random.Random(15151)
    model = "hosted_vllm/tr-sft-qwen3-8b-step1200"
    run_id = det_uuid(rng)
    day = datetime(2024, 6, 20, 8, 0, 0, tzinfo=timezone.utc)
    for i in range(8):
        seed = 15000 + i * 19
        sc = build(SCENARIOS[(i * 2) % len(SCENARIOS)], seed)
        msgs, _ = terminus_messages(sc, random.Random(seed), confirm=(i % 3 == 1))
        trial = f"{sc.key}__{rid(rng)}"
        ends = [len(msgs)] + ([len(msgs) - 4] if i in (0, 5) else [])
        for end in ends:
            conv = [{"content": m["content"], "role": m["role"]} for m in msgs[:end]]
            day += timedelta(seconds=rng.uniform(30, 900))
            rows.append({"conversations": conv, "agent": "terminus-2", "model": model, "model_provider": "hosted_vllm",
                         "date": day.isoformat(), "task": sc.key,
                         "episode": f"episode-{sum(m['role'] == 'assistant' for m in conv) - 1}",
                         "run_id": run_id, "trial_name": trial, "result": None})
    dump_jsonl(os.path.join(root, "sft", "terminus2_conversations.jsonl"), rows)
    return rows


def sharegpt_record(sc, rng, style):
    """A scenario as ShareGPT turns. style 0: LLaMA-Factory names (human, gpt, function_call, observation) and its
    `system` and `tools` columns; style 1: user/assistant/tool names and the system prompt as the first turn."""
    names = (["human", "gpt", "function_call", "observation"] if style == 0 else ["user", "assistant", "function_call", "tool"])
    conv = [] if style == 0 else [{"from": "system", "value": CLAUDE_SYSTEM}]
    rnd = sc.rounds[0]
    conv.append({"from": names[0], "value": f"{rnd.request}\n\nWorking directory: {sc.cwd} on host {sc.host}."})
    for st in rnd.steps:
        for c in st.calls:
            conv.append({"from": names[2], "value": json.dumps({"name": c.kind, "arguments": c.args}, ensure_ascii=False)})
            out = fmt_read(c.output) if c.kind == "read_file" else c.output + (f"\n\nExit code: {c.rc}" if c.rc else "")
            conv.append({"from": names[3], "value": out})
    conv.append({"from": names[1], "value": rnd.summary})
    tools = json.dumps([t["function"] for t in TOOLS], ensure_ascii=False)
    return {"conversations": conv, "system": CLAUDE_SYSTEM, "tools": tools} if style == 0 else {"conversations": conv, "tools": tools}


def write_sharegpt(root):
    rows = []
    for i in range(8):
        seed = 16000 + i * 23
        sc = build(SCENARIOS[(i * 2 + 1) % len(SCENARIOS)], seed)
        rows.append(sharegpt_record(sc, random.Random(seed), style=0 if i % 4 else 1))
    dump_jsonl(os.path.join(root, "sft", "sharegpt_tool_calls.jsonl"), rows)
    return rows


def write_swe_json_strings(root):
    """SWE-trajectory-set rows: `messages` as one JSON string, `tools` as a list of JSON strings (one row in three:
    the whole list as one JSON string), and the run's ids as top-level columns."""
    rows = []
    rng = random.Random(17171)
    for i in range(6):
        seed = 17000 + i * 29
        sc = build(SCENARIOS[(i * 3 + 2) % len(SCENARIOS)], seed)
        rec = claude_record([sc], rng, f"tu-{sc.key}", "", "swe")
        tools = json.dumps(TOOLS) if i % 3 == 2 else [json.dumps(t) for t in TOOLS]
        rows.append({"instance_id": f"{sc.key}-{seed:05d}", "model": "tr-sft-qwen3-8b-step1200",
                     "traj_id": f"{sc.key}-{seed:05d}.{hexid(rng, 8)}", "resolved": i % 5 != 4,
                     "messages": json.dumps(rec["messages"], ensure_ascii=False), "tools": tools})
    dump_jsonl(os.path.join(root, "sft", "swe_json_strings.jsonl"), rows)
    return rows
