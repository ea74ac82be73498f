"""Cumulative round verifier (EvoCode-Bench style).

usage: cases.py --round N [--app DIR] [--reward FILE]
Runs every case active in round N (new requirements plus the earlier ones still in force), prints one
line per case and `CASE_SUMMARY total_cases=T success_count=S`, and writes the round's reward to FILE:
1 when every case passes, else 0 (EvoCode-Bench: binary per-round reward, partial credit via CASE_SUMMARY).
"""
import argparse
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
def inv(w, *args):
    return run([sys.executable, os.path.join(APP, "invoice.py"), *args], cwd=w)


HEADER = "sku,qty,unit_price,category\n"
# line amounts: 3*0.335=1.005->1.01, 7*0.125=0.875->0.88, 1*19.99, 2*2.50
ITEMS = HEADER + "A,3,0.335,food\nB,7,0.125,food\nC,1,19.99,books\nD,2,2.50,toys\n"
RATES = '{"food": "0.07", "books": "0.05", "garden": "0.2"}'


def setup(w, items=ITEMS):
    write(os.path.join(w, "items.csv"), items)
    write(os.path.join(w, "rates.json"), RATES)


def lines(out):
    return dict(l.split("=", 1) for l in out.split())


@case(1)
def totals_basic_v1(w):
    setup(w)
    out = inv(w, "items.csv")
    assert out[:2] == (0, "subtotal=26.88\ntotal=26.88\n"), out


@case(1, 2, 3)
def half_up_per_line(w):
    # 0.005 -> 0.01, 0.015 -> 0.02, 1.005 -> 1.01 (half-even would give 1.02)
    setup(w, HEADER + "X,1,0.005,a\nY,1,0.015,a\nZ,3,0.335,a\n")
    rc, out, _ = inv(w, "items.csv")
    assert rc == 0 and lines(out)["subtotal"] == "1.04" and lines(out)["total"] == "1.04", out


@case(1, 2, 3)
def float_trap(w):
    setup(w, HEADER + "F,3,0.10,a\nG,1,1.10,a\nH,1,2.20,a\n")
    rc, out, _ = inv(w, "items.csv")
    assert lines(out)["subtotal"] == "3.60", out


@case(1, 2, 3)
def bad_qty_is_error(w):
    setup(w, HEADER + "A,1,1.00,x\nB,-2,1.00,x\n")
    rc, out, err = inv(w, "items.csv")
    assert rc == 1 and out == "" and "line 3" in err, (rc, out, err)


@case(1, 2, 3)
def bad_price_is_error(w):
    setup(w, HEADER + "A,1,abc,x\n")
    rc, out, err = inv(w, "items.csv")
    assert rc == 1 and out == "" and "line 2" in err, (rc, out, err)


@case(2)
def no_rates_prints_zero_tax_v2(w):
    setup(w)
    out = inv(w, "items.csv")
    assert out[:2] == (0, "subtotal=26.88\ntax=0.00\ntotal=26.88\n"), out


@case(2)
def per_line_tax_v2(w):
    setup(w)
    # food: 1.01*0.07=0.0707->0.07, 0.88*0.07=0.0616->0.06; books: 19.99*0.05=0.9995->1.00; toys 0
    out = inv(w, "items.csv", "--rates", "rates.json")
    assert out[:2] == (0, "subtotal=26.88\ntax=1.13\ntotal=28.01\n"), out


@case(2)
def per_line_rounding_v2(w):
    setup(w, HEADER + "A,1,0.07,food\nB,1,0.07,food\nC,1,0.07,food\n")
    # each line 0.07*0.07=0.0049 -> 0.00
    out = inv(w, "items.csv", "--rates", "rates.json")
    assert out[1] == "subtotal=0.21\ntax=0.00\ntotal=0.21\n", out


@case(3)
def no_options_four_lines_v3(w):
    setup(w)
    out = inv(w, "items.csv")
    assert out[:2] == (0, "subtotal=26.88\ndiscount=0.00\ntax=0.00\ntotal=26.88\n"), out


@case(3)
def per_category_tax_v3(w):
    setup(w)
    # food: (1.01+0.88)*0.07=0.1323->0.13; books 0.9995->1.00
    out = inv(w, "items.csv", "--rates", "rates.json")
    assert out[:2] == (0, "subtotal=26.88\ndiscount=0.00\ntax=1.13\ntotal=28.01\n"), out


@case(3)
def per_category_rounding_v3(w):
    setup(w, HEADER + "A,1,0.07,food\nB,1,0.07,food\nC,1,0.07,food\n")
    # 0.21*0.07=0.0147 -> 0.01
    out = inv(w, "items.csv", "--rates", "rates.json")
    assert out[1] == "subtotal=0.21\ndiscount=0.00\ntax=0.01\ntotal=0.22\n", out


@case(3)
def discount(w):
    setup(w)
    # 26.88 * 12.5% = 3.36
    out = inv(w, "items.csv", "--rates", "rates.json", "--discount", "12.5")
    assert out[:2] == (0, "subtotal=26.88\ndiscount=3.36\ntax=1.13\ntotal=24.65\n"), out
    setup(w, HEADER + "A,1,0.10,x\n")
    out = inv(w, "--discount", "5", "items.csv")  # 0.005 -> 0.01
    assert out[1] == "subtotal=0.10\ndiscount=0.01\ntax=0.00\ntotal=0.09\n", out


@case(3)
def discount_out_of_range(w):
    setup(w)
    assert inv(w, "items.csv", "--discount", "101")[0] == 2
    assert inv(w, "items.csv", "--discount", "ten")[0] == 2


if __name__ == "__main__":
    main()
