"""Seeded synthetic text: ids and hashes, `ls -la` listings, journal lines, pytest and build logs.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
Every function draws from the random.Random it is given, in a fixed order.
"""

import uuid
from datetime import timedelta


MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
WORDS = ["alpha", "beacon", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
         "kestrel", "lumen", "meridian", "nimbus", "onyx", "pylon", "quartz", "raven", "sierra", "tundra"]


def hexid(rng, n=7):
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def rid(rng, n=7):
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


def det_uuid(rng):
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def ls_la(rng, entries, owner="root", group="root", total=None):
    """entries: list of (name, kind 'd'|'f'|'x'|'l', size) -> `ls -la` text."""
    lines = [f"total {total or rng.randint(24, 480)}"]
    base = [(".", "d", 4096), ("..", "d", 4096)]
    for name, kind, size in base + list(entries):
        perm = {"d": "drwxr-xr-x", "f": "-rw-r--r--", "x": "-rwxr-xr-x", "l": "lrwxrwxrwx",
                "s": "-rw-------", "g": "drwxrws---"}[kind]
        links = rng.randint(2, 9) if kind in "dg" else 1
        m = rng.choice(MONTHS[:10])
        d = rng.randint(1, 28)
        t = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        nm = name if kind != "l" else f"{name} -> {size}"
        sz = size if kind != "l" else len(str(size))
        lines.append(f"{perm} {links:2d} {owner:<8} {group:<8} {sz:>8} {m} {d:2d} {t} {nm}")
    return "\n".join(lines)


def ts_iter(rng, start, step_lo=0.2, step_hi=9.0):
    t = start
    while True:
        t = t + timedelta(seconds=rng.uniform(step_lo, step_hi))
        yield t


def journal(rng, host, unit, proc, pid0, events, start, repeat=1):
    """events: list of message strings; returns journalctl-like lines."""
    out = []
    it = ts_iter(rng, start)
    pid = pid0
    for r in range(repeat):
        for ev in events:
            t = next(it)
            src = "systemd[1]" if ev.startswith(("Started", "Stopped", "Starting", f"{unit}:", "Scheduled")) else f"{proc}[{pid}]"
            out.append(f"{t.strftime('%b %d %H:%M:%S')} {host} {src}: {ev}")
        pid += rng.randint(3, 40)
    return "\n".join(out)


def pytest_log(rng, root, files, failures, duration=None, extra_fail_text=""):
    """files: list of (path, ntests); failures: dict test_id -> short message."""
    n = sum(k for _, k in files)
    lines = ["============================= test session starts ==============================",
             "platform linux -- Python 3.11.9, pytest-8.2.2, pluggy-1.5.0",
             f"rootdir: {root}", "configfile: pyproject.toml", "plugins: cov-5.0.0, xdist-3.6.1",
             f"collected {n} items", ""]
    done = 0
    for path, k in files:
        marks = "".join("F" if any(f.startswith(path) and f.endswith(f"_{i}") for f in failures) else "." for i in range(k))
        done += k
        lines.append(f"{path} {marks:<40} [{int(100 * done / n):3d}%]")
    nf = len(failures)
    if nf:
        lines += ["", "=================================== FAILURES ==================================="]
        for tid, msg in failures.items():
            name = tid.split("::")[-1]
            lines += [f"_{'_' * 20} {name} {'_' * 20}", "", extra_fail_text or msg, ""]
        lines.append("=========================== short test summary info ============================")
        for tid, msg in failures.items():
            lines.append(f"FAILED {tid} - {msg.splitlines()[-1][:90]}")
    dur = duration or round(rng.uniform(0.8, 14.0), 2)
    tail = f"{nf} failed, {n - nf} passed" if nf else f"{n} passed"
    lines.append(f"{'=' * 22} {tail} in {dur}s {'=' * 22}")
    return "\n".join(lines)


def big_log_lines(rng, n, fmt):
    return "\n".join(fmt(rng, i) for i in range(n))


def pad_block(rng, title, n):
    """a long but plausible block (for the long records): verbose build log lines."""
    mods = ["core", "io", "net", "util", "parse", "store", "auth", "cache", "sched", "metrics"]
    out = [f"--- {title} ---"]
    for i in range(n):
        m = rng.choice(mods)
        f = f"src/{m}/{rng.choice(WORDS)}_{rng.randint(1, 40)}.c"
        out.append(f"cc -O2 -g -Wall -Wextra -fPIC -Iinclude -Isrc -DNDEBUG -MMD -MP -c {f} -o build/{f[4:-2]}.o")
        if rng.random() < 0.12:
            out.append(f"{f}:{rng.randint(10, 900)}:{rng.randint(2, 40)}: warning: unused variable 'tmp{rng.randint(0, 9)}' [-Wunused-variable]")
    return "\n".join(out)
