"""Writing rows as JSON Lines (one object a line, UTF-8, non-ASCII kept), as every .jsonl sample is written.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
"""

import json
import os


def dump_jsonl(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
