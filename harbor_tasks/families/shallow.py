"""The shallow families: one short job each, whose instruction states every value the solution needs.
Runs in: any Python >= 3.11, standard library only.

Each is one function `(rng) -> Instance` of one random stream (instruction and workspace alike): the solution follows
from the instruction alone, and the teacher replays it (solution/solve.sh). The deep families are the ones that need
looking (harbor_tasks/families/deep_*.py).
"""

from __future__ import annotations

import random

from harbor_tasks.families.instance import DIRS, WORDS, Instance, file_is, number_is, q, words


def write_value(rng: random.Random) -> Instance:
    """Write a given value to /app/out/<name>.txt."""
    name = f"{rng.choice(WORDS)}_{rng.choice(['token', 'key', 'id', 'code'])}"
    value = f"{rng.choice(WORDS)}-{rng.randint(1000, 99999)}"
    path = f"out/{name}.txt"
    return Instance(
        instruction=f"Create the file `/app/{path}` (create `/app/out/` if needed) containing exactly the text "
                    f"`{value}` followed by a single newline.",
        files={"README.txt": "Write the requested value into /app/out/.\n"},
        solve=["mkdir -p out", f"echo {q(value)} > {q(path)}"],
        checks=[file_is(path, value + "\n")], category="file-ops")


def count_lines(rng: random.Random) -> Instance:
    """Write the line count of a log file to /app/line_count.txt."""
    d, name = rng.choice(DIRS), rng.choice(WORDS)
    n = rng.randint(5, 40)
    lines = [f"{rng.choice(WORDS)} {rng.randint(0, 999)} {rng.choice(WORDS)}" for _ in range(n)]
    return Instance(
        instruction=f"Count the lines of `/app/{d}/{name}.log` and write the count, as a plain decimal number "
                    f"followed by a newline, to `/app/line_count.txt`.",
        files={f"{d}/{name}.log": "".join(line + "\n" for line in lines)},
        solve=[f"wc -l < {d}/{name}.log > line_count.txt"],
        checks=[number_is("line_count.txt", n)], category="text-processing")


def count_words(rng: random.Random) -> Instance:
    """Write the word count of a text file to /app/word_count.txt."""
    d, name = rng.choice(DIRS), rng.choice(WORDS)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))) for _ in range(rng.randint(3, 15))]
    total = sum(len(line.split()) for line in lines)
    return Instance(
        instruction=f"Count the words (whitespace-separated, as `wc -w` counts them) in `/app/{d}/{name}.txt` and "
                    f"write the count, as a plain decimal number followed by a newline, to `/app/word_count.txt`.",
        files={f"{d}/{name}.txt": "".join(line + "\n" for line in lines)},
        solve=[f"wc -w < {d}/{name}.txt > word_count.txt"],
        checks=[number_is("word_count.txt", total)], category="text-processing")


def rename_ext(rng: random.Random) -> Instance:
    """Rename every *.<a> in a directory to *.<b>, leave the other files alone."""
    d = rng.choice(DIRS)
    old, new, other = rng.sample(["txt", "md", "log", "dat", "csv", "bak", "cfg", "out"], 3)
    stems = words(rng, rng.randint(4, 7))
    k = rng.randint(2, len(stems) - 1)
    renamed, kept = stems[:k], stems[k:]
    files = {f"{d}/{s}.{old}": f"{s} {rng.randint(0, 9999)}\n" for s in renamed}
    files.update({f"{d}/{s}.{other}": f"{s} {rng.randint(0, 9999)}\n" for s in kept})
    checks = []
    for s in renamed:
        checks += [f"[ ! -e {q(f'{d}/{s}.{old}')} ]", file_is(f"{d}/{s}.{new}", files[f"{d}/{s}.{old}"])]
    checks += [file_is(f"{d}/{s}.{other}", files[f"{d}/{s}.{other}"]) for s in kept]
    checks.append(f"[ \"$(ls -A {q(d)} | wc -l)\" = {len(stems)} ]")
    return Instance(
        instruction=f"In `/app/{d}/`, rename every file ending in `.{old}` so that it ends in `.{new}` instead "
                    f"(`x.{old}` becomes `x.{new}`), keeping its content. Do not touch the other files.",
        files=files,
        solve=[f"cd {d}", f"for f in *.{old}; do mv -- \"$f\" \"${{f%.{old}}}.{new}\"; done"],
        checks=checks, category="file-ops")


def replace_config(rng: random.Random) -> Instance:
    """Change one key's value in a `key = value` config, every other line unchanged."""
    name = rng.choice(WORDS)
    keys = ["host", "port", "workers", "timeout", "log_level", "cache_size", "retries", "mode"]
    rng.shuffle(keys)
    values = {"host": f"{rng.choice(WORDS)}.internal", "port": str(rng.randint(1024, 9999)),
              "workers": str(rng.randint(1, 16)), "timeout": str(rng.randint(5, 120)),
              "log_level": rng.choice(["debug", "info", "warning"]), "cache_size": str(rng.randint(16, 512)),
              "retries": str(rng.randint(1, 9)), "mode": rng.choice(["fast", "safe", "batch"])}
    key = rng.choice(["port", "workers", "timeout", "cache_size", "retries"])
    new = str(int(values[key]) + rng.randint(1, 50))
    before = "".join(f"{k} = {values[k]}\n" for k in keys)
    after = before.replace(f"{key} = {values[key]}\n", f"{key} = {new}\n")
    path = f"config/{name}.conf"
    return Instance(
        instruction=f"In `/app/{path}`, change the value of `{key}` from `{values[key]}` to `{new}`. Keep the "
                    f"`key = value` format and leave every other line unchanged.",
        files={path: before},
        solve=[f"sed -i 's/^{key} = .*/{key} = {new}/' {path}"],
        checks=[file_is(path, after)], category="config")


def sort_uniq(rng: random.Random) -> Instance:
    """Write a file's lines sorted and deduplicated next to it."""
    d, name = rng.choice(DIRS), rng.choice(WORDS)
    pool = words(rng, rng.randint(5, 10))
    lines = pool + [rng.choice(pool) for _ in range(rng.randint(4, 12))]
    rng.shuffle(lines)
    expected = "".join(w + "\n" for w in sorted(set(lines)))
    return Instance(
        instruction=f"Write the lines of `/app/{d}/{name}.txt` sorted alphabetically with duplicates removed "
                    f"(each distinct line once, as `sort -u` prints them) to `/app/{d}/{name}.sorted.txt`. Leave "
                    f"the original file unchanged.",
        files={f"{d}/{name}.txt": "".join(w + "\n" for w in lines)},
        solve=[f"LC_ALL=C sort -u {d}/{name}.txt > {d}/{name}.sorted.txt"],
        checks=[file_is(f"{d}/{name}.sorted.txt", expected),
                file_is(f"{d}/{name}.txt", "".join(w + "\n" for w in lines))], category="text-processing")


def csv_column(rng: random.Random) -> Instance:
    """Extract one named column of a CSV (without the header) to a file."""
    name = rng.choice(WORDS)
    header = rng.sample(["id", "name", "city", "score", "team", "level", "color", "size"], rng.randint(3, 6))
    col = rng.randrange(len(header))
    rows = [[f"{rng.choice(WORDS)}{rng.randint(1, 99)}" for _ in header] for _ in range(rng.randint(4, 12))]
    csv = ",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    expected = "".join(r[col] + "\n" for r in rows)
    return Instance(
        instruction=f"`/app/{name}.csv` is a comma-separated file with a header line (no quoting). Write the values "
                    f"of its `{header[col]}` column, one per line in file order and without the header, to "
                    f"`/app/{header[col]}.txt`.",
        files={f"{name}.csv": csv},
        # by the column's name, not its position: the instruction does not say where the column is, and a solution
        # (a teacher's, a student's) that follows from the instruction alone needs no look at the file first
        solve=[f"awk -F, -v col={header[col]} 'NR == 1 {{for (i = 1; i <= NF; i++) if ($i == col) c = i; next}} "
               f"{{print $c}}' {name}.csv > {header[col]}.txt"],
        checks=[file_is(f"{header[col]}.txt", expected)], category="data-processing")


def sum_numbers(rng: random.Random) -> Instance:
    """Write the sum of a file's integers to /app/sum.txt."""
    d, name = rng.choice(DIRS), rng.choice(WORDS)
    nums = [rng.randint(-500, 2000) for _ in range(rng.randint(5, 25))]
    return Instance(
        instruction=f"`/app/{d}/{name}.nums` holds one integer per line. Write their sum, as a plain decimal "
                    f"number followed by a newline, to `/app/sum.txt`.",
        files={f"{d}/{name}.nums": "".join(f"{x}\n" for x in nums)},
        solve=[f"awk '{{s += $1}} END {{print s}}' {d}/{name}.nums > sum.txt"],
        checks=[number_is("sum.txt", sum(nums))], category="data-processing")


def make_tree(rng: random.Random) -> Instance:
    """Create a listed directory tree and a .done marker."""
    root = rng.choice(["site", "release", "build", "deploy", "archive", "bundle"]) + f"_{rng.randint(10, 99)}"
    tops = words(rng, rng.randint(2, 3))
    dirs = [f"{root}/{t}/{s}" for t in tops for s in sorted(rng.sample(["src", "bin", "etc", "logs", "tmp", "lib"],
                                                                        rng.randint(1, 3)))]
    listing = "\n".join(f"- `/app/{p}`" for p in dirs)
    return Instance(
        instruction=f"Create these directories (and their parents) under `/app`:\n\n{listing}\n\n"
                    f"Then create an empty file `/app/{root}/.done`.",
        files={"README.txt": "Create the requested directory tree here.\n"},
        solve=[f"mkdir -p {' '.join(dirs)}", f"touch {root}/.done"],
        checks=[f"[ -d {q(p)} ]" for p in dirs] + [file_is(f"{root}/.done", "")], category="file-ops")


def set_perms(rng: random.Random) -> Instance:
    """Set the listed octal modes of three files."""
    d = rng.choice(["bin", "scripts", "secrets", "keys", "deploy"])
    stems = words(rng, 3)
    modes = {s: rng.choice(["600", "640", "700", "750", "755", "400", "444"]) for s in stems}
    files = {f"{d}/{s}.conf": f"# {s}\nvalue={rng.randint(0, 999)}\n" for s in stems}
    table = "\n".join(f"- `/app/{d}/{s}.conf`: `{modes[s]}`" for s in stems)
    return Instance(
        instruction=f"Set these octal permission modes exactly:\n\n{table}\n\nDo not change the files' contents.",
        files=files,
        setup=[f"chmod 0666 {d}/*.conf"],
        solve=[f"chmod {modes[s]} {d}/{s}.conf" for s in stems],
        checks=[f"[ \"$(stat -c %a {q(f'{d}/{s}.conf')})\" = {modes[s]} ]" for s in stems]
               + [file_is(p, c) for p, c in files.items()], category="permissions")


FAMILIES = (write_value, count_lines, count_words, rename_ext, replace_config, sort_uniq, csv_column, sum_numbers,
            make_tree, set_perms)
