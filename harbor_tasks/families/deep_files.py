"""Deep families over a tree of files: the file that holds a ticket, a chain of notes, the largest file.
Runs in: any Python >= 3.11, standard library only.

The instruction names what to find, never where it is or what it holds: the world (file names, their places, the
values) comes from its own stream, so another world needs other commands. Each policy types the values it read.
"""

from __future__ import annotations

import random
import re

from harbor_tasks.families.instance import WORDS, Family, Instance, file_is, found, lines, q

NAMES = ["ada", "bruno", "chen", "dara", "elif", "femi", "goran", "hana", "ivo", "jules", "kemal", "lena", "milo",
         "nadia", "oskar", "priya", "quinn", "rafa", "sanna", "tomas", "uma", "vera", "wren", "yusuf", "zora"]
STATUSES = ["open", "closed", "waiting", "escalated", "resolved"]
# each family's commands, written once: the task's solution lists them with the world's values, the teacher types
# them with the values it read
SHOW = "cat {}".format
OWNER_WRITE = "echo {} > owner.txt".format
CHAIN_WRITE = "echo {} > key.txt".format
LARGEST_LIST = "find cache -type f -printf '%s %p\\n' | sort -n | tail -n 3"
LARGEST_STEPS = ("mkdir -p {into}", "mv {path} {into}/", "ls -l {into}")


def owner_find(ticket: str) -> str:
    return f"grep -rl {q('ticket: ' + ticket)} archive"


# ------------------------------------------------------------------------------------------------------ find-owner
def ask_owner(rng: random.Random) -> dict:
    return {"ticket": f"{rng.choice(WORDS).upper()}-{rng.randint(1000, 9999)}"}


def build_owner(asked: dict, rng: random.Random) -> Instance:
    ticket = asked["ticket"]
    prefix, number = ticket.split("-")
    dirs = rng.sample(["2024", "2025", "q1", "q2", "q3", "ops", "infra", "billing", "legacy"], rng.randint(3, 5))
    paths = [f"archive/{d}/{w}.txt" for d in dirs for w in rng.sample(WORDS, rng.randint(3, 5))]
    target = rng.choice(paths)
    owner = rng.choice(NAMES)
    taken = {ticket}
    files = {}
    for path in paths:
        if path == target:
            this, who = ticket, owner
        else:  # other tickets, some of the same prefix (a near miss for a loose search)
            while (this := f"{prefix if rng.random() < 0.3 else rng.choice(WORDS).upper()}-"
                           f"{rng.randint(1000, 9999)}") in taken:
                pass
            taken.add(this)
            who = rng.choice([n for n in NAMES if n != owner] if rng.random() < 0.7 else NAMES)
        files[path] = lines(f"ticket: {this}", f"owner: {who}", f"status: {rng.choice(STATUSES)}",
                            f"note: {' '.join(rng.sample(WORDS, 4))}")
    return Instance(
        instruction=f"Exactly one file under `/app/archive/` is about ticket `{ticket}`. Find it, read its `owner:` "
                    f"line, and write that owner's name (just the name, followed by a newline) to `/app/owner.txt`.",
        files=files,
        solve=[owner_find(ticket), SHOW(target), OWNER_WRITE(owner), SHOW("owner.txt")],
        checks=[file_is("owner.txt", owner + "\n")], category="search")


def teach_owner(asked: dict):
    listed = yield owner_find(asked["ticket"])
    path = found(r"^(archive/\S+\.txt)$", listed, "file of the ticket").group(1)
    shown = yield SHOW(path)
    owner = found(r"^owner: (\w+)$", shown, "owner line").group(1)
    yield OWNER_WRITE(owner)
    yield SHOW("owner.txt")


# ------------------------------------------------------------------------------------------------------ hint-chain
def ask_chain(rng: random.Random) -> dict:
    return {"service": rng.choice(WORDS) + rng.choice(["-api", "-db", "-queue", "-web", "-cron"])}


def build_chain(asked: dict, rng: random.Random) -> Instance:
    service = asked["service"]
    others = [w + rng.choice(["-api", "-db", "-queue", "-web", "-cron"]) for w in rng.sample(WORDS, 5)
              if not service.startswith(w + "-")][:4]
    hops = rng.randint(2, 3)
    places = [f"notes/{rng.choice(['ops', 'teams', 'infra', 'handover'])}/{w}.md" for w in rng.sample(WORDS, hops)]
    places = list(dict.fromkeys(places))
    vault = f"vault/{rng.choice(WORDS)}/{rng.choice(WORDS)}-{rng.randint(10, 99)}.key"
    key = f"{rng.choice(WORDS)}-{rng.randint(100000, 999999)}"
    chain = places + [vault]
    files = {}
    start = [f"- {s}: see notes/{rng.choice(['ops', 'teams'])}/{rng.choice(WORDS)}-{i}.md"
             for i, s in enumerate(others)]
    start.insert(rng.randint(0, len(start)), f"- {service}: see {chain[0]}")
    files["notes/start.txt"] = lines("Where each service's deploy key is documented:", *start)
    for here, there in zip(chain, chain[1:]):
        files[here] = lines(f"# {service}", f"The deploy key of {service} moved; it is now kept in {there}",
                            f"(last checked by {rng.choice(NAMES)})")
    decoys = [f"{s}={rng.choice(WORDS)}-{rng.randint(100000, 999999)}" for s in others[:2]]
    entries = decoys + [f"{service}={key}"]
    rng.shuffle(entries)
    files[vault] = lines(*entries)
    reads = [SHOW(path) for path in ["notes/start.txt", *chain]]
    return Instance(
        instruction=f"The deploy key of service `{service}` is documented somewhere under `/app/`. Start at "
                    f"`/app/notes/start.txt` and follow the notes to the key, then write the key (just the key, "
                    f"followed by a newline) to `/app/key.txt`.",
        files=files, solve=reads + [CHAIN_WRITE(key)],
        checks=[file_is("key.txt", key + "\n")], category="search")


def teach_chain(asked: dict):
    service = asked["service"]
    shown = yield SHOW("notes/start.txt")
    place = found(rf"^- {re.escape(service)}: see (\S+)$", shown, f"note of {service}").group(1)
    while True:
        shown = yield SHOW(place)
        key = re.search(rf"^{re.escape(service)}=(\S+)$", shown, flags=re.M)
        if key:
            break
        place = found(r"now kept in (\S+)$", shown, "next place").group(1)
    yield CHAIN_WRITE(key.group(1))


# ---------------------------------------------------------------------------------------------------- largest-file
def ask_largest(rng: random.Random) -> dict:
    return {"into": rng.choice(["quarantine", "suspect", "review", "holding"])}


def build_largest(asked: dict, rng: random.Random) -> Instance:
    into = asked["into"]
    dirs = [f"cache/{d}" for d in rng.sample(["img", "tmp", "blobs", "thumbs", "pkg", "sessions", "logs"], 3)]
    paths = [f"{rng.choice(dirs)}/{w}{rng.choice(['.bin', '.dat', '.tmp', '.part'])}" for w in rng.sample(WORDS, 10)]
    sizes = rng.sample(range(200, 4000), len(paths))
    big = rng.randrange(len(paths))
    sizes[big] = max(sizes) + rng.randint(500, 3000)
    files = {p: ((rng.choice(WORDS) + " ") * size)[:size - 1] + "\n" for p, size in zip(paths, sizes)}
    target = paths[big]
    name = target.rsplit("/", 1)[1]
    checks = [f"[ ! -e {q(target)} ]", file_is(f"{into}/{name}", files[target]),
              f"[ \"$(find cache -type f | wc -l)\" = {len(paths) - 1} ]"]
    checks += [file_is(p, c) for p, c in files.items() if p != target]
    return Instance(
        instruction=f"Something under `/app/cache/` is filling the disk. Move the largest file under `/app/cache/` "
                    f"(by size in bytes) into `/app/{into}/` (create it), keeping its file name, and leave every other "
                    f"file where it is.",
        files=files,
        solve=[LARGEST_LIST, *(step.format(path=target, into=into) for step in LARGEST_STEPS)],
        checks=checks, category="file-ops")


def teach_largest(asked: dict):
    listed = yield LARGEST_LIST
    path = found(r"^\d+ (cache/\S+)$", listed, "file with its size").group(1)
    for step in LARGEST_STEPS:
        yield step.format(path=path, into=asked["into"])


FAMILIES = (
    Family("find-owner", "deep", "find the one file under /app/archive about a ticket; write its owner's name",
           build_owner, ask_owner, teach_owner),
    Family("hint-chain", "deep", "follow notes from /app/notes/start.txt through 2-3 files to a service's key",
           build_chain, ask_chain, teach_chain),
    Family("largest-file", "deep", "find the largest file under /app/cache and move it aside",
           build_largest, ask_largest, teach_largest),
)
