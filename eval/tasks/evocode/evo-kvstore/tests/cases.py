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
def kv(w, *args, now=None, env=None):
    e = {"KV_FILE": os.path.join(w, "store.json"), **(env or {})}
    if now is not None:
        e["KV_NOW"] = str(now)
    return run([sys.executable, os.path.join(APP, "kv.py"), *args], cwd=w, env=e)


@case(1, 2, 3)
def set_get_roundtrip(w):
    assert kv(w, "set", "alpha", "one")[:2] == (0, "")
    assert kv(w, "get", "alpha")[:2] == (0, "one\n")


@case(1, 2, 3)
def value_with_spaces_and_overwrite(w):
    kv(w, "set", "greeting", "hello big world")
    assert kv(w, "get", "greeting")[1] == "hello big world\n"
    kv(w, "set", "greeting", "bye")
    assert kv(w, "get", "greeting")[1] == "bye\n"


@case(1, 2, 3)
def persists_in_kv_file_as_json(w):
    kv(w, "set", "a", "1")
    kv(w, "set", "b", "2")
    data = json.load(open(os.path.join(w, "store.json")))
    assert isinstance(data, dict) and len(data) == 2


@case(1, 2, 3)
def default_file_in_cwd(w):
    env = {k: v for k, v in os.environ.items() if k != "KV_FILE"}
    p = subprocess.run([sys.executable, os.path.join(APP, "kv.py"), "set", "x", "y"], cwd=w, env=env,
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 0 and os.path.exists(os.path.join(w, "kv.json")), p.stderr


@case(1, 2)
def get_missing_exits_1(w):
    assert kv(w, "get", "nope")[:2] == (1, "")


@case(3)
def get_missing_prints_nil(w):
    assert kv(w, "get", "nope")[:2] == (0, "(nil)\n")


@case(1, 2, 3)
def delete_existing_and_missing(w):
    kv(w, "set", "k", "v")
    assert kv(w, "del", "k")[0] == 0
    assert kv(w, "del", "k")[0] == 1


@case(1, 2, 3)
def usage_errors_exit_2(w):
    rc, out, err = kv(w, "frobnicate")
    assert rc == 2 and err.strip(), (rc, err)
    assert kv(w, "set", "only-key")[0] == 2
    assert kv(w, "get")[0] == 2


@case(2, 3)
def list_sorted_and_prefix(w):
    for k, v in (("b2", "x"), ("a1", "y"), ("b1", "z")):
        kv(w, "set", k, v)
    assert kv(w, "list")[:2] == (0, "a1=y\nb1=z\nb2=x\n")
    assert kv(w, "list", "--prefix", "b")[1] == "b1=z\nb2=x\n"
    assert kv(w, "list", "--prefix", "zz")[:2] == (0, "")


@case(2, 3)
def count_live_keys(w):
    kv(w, "set", "a", "1", now=100)
    kv(w, "set", "b", "2", "--ttl", "10", now=100)
    assert kv(w, "count", now=105)[1].strip() == "2"
    assert kv(w, "count", now=110)[1].strip() == "1"


@case(2, 3)
def ttl_live_before_expiry(w):
    kv(w, "set", "s", "tok", "--ttl", "30", now=1000)
    assert kv(w, "get", "s", now=1029.5)[:2] == (0, "tok\n")


@case(2)
def ttl_expired_is_missing_v2(w):
    kv(w, "set", "s", "tok", "--ttl", "30", now=1000)
    assert kv(w, "get", "s", now=1030)[:2] == (1, "")
    assert kv(w, "del", "s", now=1030)[0] == 1


@case(3)
def ttl_expired_is_missing_v3(w):
    kv(w, "set", "s", "tok", "--ttl", "30", now=1000)
    assert kv(w, "get", "s", now=1030)[:2] == (0, "(nil)\n")
    assert kv(w, "del", "s", now=1030)[0] == 1


@case(2, 3)
def set_without_ttl_clears_ttl(w):
    kv(w, "set", "s", "a", "--ttl", "5", now=0)
    kv(w, "set", "s", "b", now=1)
    assert kv(w, "get", "s", now=999999)[1] == "b\n"
    assert kv(w, "list", now=999999)[1] == "s=b\n"


@case(3)
def keys_case_insensitive(w):
    kv(w, "set", "Foo", "1")
    assert kv(w, "get", "FOO")[1] == "1\n"
    kv(w, "set", "fOO", "2")
    kv(w, "set", "Bar", "3")
    assert kv(w, "list")[1] == "bar=3\nfoo=2\n"
    assert kv(w, "list", "--prefix", "B")[1] == "bar=3\n"
    assert kv(w, "del", "BAR")[0] == 0


@case(3)
def incr_counts(w):
    assert kv(w, "incr", "hits")[:2] == (0, "1\n")
    assert kv(w, "incr", "Hits", "10")[1] == "11\n"
    assert kv(w, "incr", "hits", "-12")[1] == "-1\n"
    assert kv(w, "get", "hits")[1] == "-1\n"


@case(3)
def incr_rejects_non_integer(w):
    kv(w, "set", "name", "bob")
    rc, out, err = kv(w, "incr", "name")
    assert rc == 1 and err.strip()
    assert kv(w, "get", "name")[1] == "bob\n"


@case(3)
def incr_keeps_ttl(w):
    kv(w, "set", "c", "5", "--ttl", "10", now=0)
    assert kv(w, "incr", "c", now=5)[1] == "6\n"
    assert kv(w, "get", "c", now=9)[1] == "6\n"
    assert kv(w, "get", "c", now=10)[1] == "(nil)\n"


if __name__ == "__main__":
    main()
