"""Cumulative round verifier (EvoCode-Bench style).

usage: cases.py --round N [--app DIR] [--reward FILE]
Runs every case active in round N (new requirements plus the earlier ones still in force), prints one
line per case and `CASE_SUMMARY total_cases=T success_count=S`, and writes the round's reward to FILE:
1 when every case passes, else 0 (EvoCode-Bench: binary per-round reward, partial credit via CASE_SUMMARY).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback

APP = "/app"
CASES = []


def case(*rounds):
    """Register a case active in the given rounds."""
    def deco(fn):
        CASES.append((fn.__name__, set(rounds), fn))
        return fn
    return deco


def run(args, cwd, stdin=None, env=None, timeout=20):
    """Run a command; returns (returncode, stdout, stderr)."""
    e = {**os.environ, **(env or {})}
    p = subprocess.run(args, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout, env=e)
    return p.returncode, p.stdout, p.stderr


def write(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main():
    global APP
    ap = argparse.ArgumentParser()
    ap.add_argument("--round", type=int, required=True)
    ap.add_argument("--app", default=os.environ.get("APP_DIR", "/app"))
    ap.add_argument("--reward", default=os.path.join(os.environ.get("LOGS_DIR", "/logs"), "verifier/reward.txt"))
    args = ap.parse_args()
    APP = args.app
    active = [(name, fn) for name, rounds, fn in CASES if args.round in rounds]
    ok = 0
    for name, fn in active:
        tmp = tempfile.mkdtemp(prefix="case-")
        try:
            fn(tmp)
            ok += 1
            print(f"PASS {name}")
        except Exception as exc:  # noqa: BLE001 - any failure fails the case
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            print(f"FAIL {name}: {detail[:500]}")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"CASE_SUMMARY total_cases={len(active)} success_count={ok}")
    os.makedirs(os.path.dirname(args.reward), exist_ok=True)
    with open(args.reward, "w") as f:
        f.write("1\n" if active and ok == len(active) else "0\n")


# ---------------------------------------------------------------- task cases
def ts(w, *args, stdin=None):
    return run([sys.executable, os.path.join(APP, "textstats.py"), *args], cwd=w, stdin=stdin)


PLAIN = "the cat sat\non the mat\n\nthe end"
PUNCT = "Hello, hello! -- HELLO world.\nWorld's end?\n"


@case(1, 2, 3)
def counts_plain(w):
    write(os.path.join(w, "a.txt"), PLAIN)
    out = ts(w, "a.txt")[:2]
    assert out == (0, "lines=4 words=8 chars=31\n"), out


@case(1, 2, 3)
def counts_unicode_chars(w):
    write(os.path.join(w, "u.txt"), "naïve café\nüber\n")
    assert ts(w, "u.txt")[1] == "lines=2 words=3 chars=16\n"


@case(1, 2, 3)
def empty_file(w):
    write(os.path.join(w, "e.txt"), "")
    assert ts(w, "e.txt")[:2] == (0, "lines=0 words=0 chars=0\n")


@case(1, 2, 3)
def missing_file_exit_1(w):
    rc, out, err = ts(w, "nope.txt")
    assert rc == 1 and err.strip() and out == ""


@case(1, 2)
def punctuation_counts_as_is(w):
    write(os.path.join(w, "p.txt"), PUNCT)
    assert ts(w, "p.txt")[1] == "lines=2 words=7 chars=43\n"


@case(2, 3)
def stdin_dash(w):
    assert ts(w, "-", stdin="a b\nc\n")[1] == "lines=2 words=3 chars=6\n"


@case(2, 3)
def top_k_ordering(w):
    write(os.path.join(w, "a.txt"), PLAIN)
    want = "lines=4 words=8 chars=31\ntop:\nthe 3\ncat 1\nend 1\n"
    assert ts(w, "a.txt", "--top", "3")[1] == want
    assert ts(w, "--top", "3", "a.txt")[1] == want


@case(2, 3)
def top_k_more_than_distinct(w):
    write(os.path.join(w, "b.txt"), "b a b\n")
    assert ts(w, "--top", "10", "b.txt")[1] == "lines=1 words=3 chars=6\ntop:\nb 2\na 1\n"


@case(2)
def top_tokens_as_is_v2(w):
    write(os.path.join(w, "p.txt"), PUNCT)
    out = ts(w, "p.txt", "--top", "2")[1]
    assert out == "lines=2 words=7 chars=43\ntop:\n--" + " 1\nHELLO 1\n", out


@case(3)
def normalised_words(w):
    write(os.path.join(w, "p.txt"), PUNCT)
    assert ts(w, "p.txt")[1] == "lines=2 words=6 chars=43\n"
    out = ts(w, "p.txt", "--top", "3")[1]
    assert out == "lines=2 words=6 chars=43\ntop:\nhello 3\nend 1\nworld 1\n", out


@case(3)
def json_output(w):
    write(os.path.join(w, "p.txt"), PUNCT)
    rc, out, _ = ts(w, "--json", "p.txt")
    assert rc == 0 and json.loads(out) == {"lines": 2, "words": 6, "chars": 43}
    rc, out, _ = ts(w, "p.txt", "--top", "2", "--json")
    assert json.loads(out) == {"lines": 2, "words": 6, "chars": 43, "top": [["hello", 3], ["end", 1]]}


@case(3)
def json_stdin_empty(w):
    rc, out, _ = ts(w, "--json", "-", stdin="")
    assert rc == 0 and json.loads(out) == {"lines": 0, "words": 0, "chars": 0}


if __name__ == "__main__":
    main()
