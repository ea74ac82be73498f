#!/usr/bin/env python3
"""Generate the sample corpora under data/ (stdlib only, deterministic): the entry point of the modules in data/samples/.
Runs in: any Python >= 3.11, standard library only, from any working directory; it writes next to itself.

    python data/make_samples.py          # writes every file listed in data/README.md
    python data/check_samples.py         # validates them

The 15 hand-written scenarios (samples/scenarios_*.py), each a task's rounds of steps and tool calls, rendered as:
* Claude-Code style OpenAI tool calling    -> data/sft/agent_tool_calls.jsonl         (samples/tool_calls.py)
* Terminus-2 JSON chat                     -> data/sft/terminus2_chat.jsonl           (samples/terminus.py)
* Terminus pivot rows (NeMo Gym judge)     -> data/pivot/terminal_pivot.jsonl         (samples/terminus.py)
* Harbor job directory with ATIF files     -> data/harbor/sample-job/                 (samples/harbor_job.py)
* OpenThoughts-Agent / Terminus-2 rows     -> data/sft/terminus2_conversations.jsonl  (samples/public_formats.py)
* ShareGPT tool calling (LLaMA-Factory)    -> data/sft/sharegpt_tool_calls.jsonl      (samples/public_formats.py)
* SWE trajectories with JSON-string fields -> data/sft/swe_json_strings.jsonl         (samples/public_formats.py)

All randomness comes from random.Random(seed), a new one per corpus and per scenario; no clock, no uuid4.
"""

import os
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))  # data/: the corpora are written here
sys.path.insert(0, ROOT)  # so that `samples` imports however this file is started
sys.dont_write_bytecode = True  # and leaves no __pycache__ among the corpora

from samples.harbor_job import write_harbor_job  # noqa: E402
from samples.public_formats import write_sharegpt, write_swe_json_strings, write_terminus_conversations  # noqa: E402
from samples.terminus import write_pivots, write_terminus_chat  # noqa: E402
from samples.tool_calls import write_sft_tool_calls  # noqa: E402


def main():
    a = write_sft_tool_calls(ROOT)
    b = write_terminus_chat(ROOT)
    c = write_pivots(ROOT)
    d = write_harbor_job(ROOT)
    e = write_terminus_conversations(ROOT)
    f = write_sharegpt(ROOT)
    g = write_swe_json_strings(ROOT)
    print(f"agent_tool_calls: {len(a)}  terminus2_chat: {len(b)}  terminal_pivot: {len(c)}  harbor trials: {len(d)}  "
          f"terminus2_conversations: {len(e)}  sharegpt_tool_calls: {len(f)}  swe_json_strings: {len(g)}")


if __name__ == "__main__":
    main()
