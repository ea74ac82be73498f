"""sandbox/names_asked.py: the host's record of the resolver's reports counts every query and keeps a bounded set of
names, without losing the names of a phase to a flood before it."""

from __future__ import annotations

import json

from sandbox.names_asked import MAX_NAMES_PER_SPAN, NamesAsked


def _lines(*records: dict) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def test_counts_have_no_cap_and_names_stay_bounded():
    asked = NamesAsked()
    for i in range(5000):
        asked.feed(_lines({"name": f"mirror{i}.example", "type": 1, "comm": "apt-get", "orphan": False}))
    build = asked.mark()
    assert build == 5000 and asked.count(0, until=build) == 5000
    assert len(asked.names(0, until=build)) == MAX_NAMES_PER_SPAN
    asked.feed(_lines({"name": "_http._tcp.astral.sh", "type": 33, "comm": "curl", "orphan": False}))
    assert asked.names(build, commands_only=True) == ["astral.sh"]
    assert asked.count(build, commands_only=True) == 1 and asked.count() == 5001


def test_a_flood_of_orphan_names_does_not_hide_a_running_commands_name():
    asked = NamesAsked()
    mark = asked.mark()
    # a daemon the agent left behind fills the span with distinct names before the verifier asks its one
    asked.feed(_lines(*({"name": f"x{i}.example", "comm": "sh", "orphan": True} for i in range(1000))))
    asked.feed(_lines({"name": "pypi.org", "comm": "pip", "orphan": False}))
    assert asked.names(mark, commands_only=True) == ["pypi.org"]
    assert asked.count(mark) == 1001 and asked.count(mark, commands_only=True) == 1


def test_lost_records_partial_lines_and_garbage():
    asked = NamesAsked()
    record = json.dumps({"name": "deb.debian.org", "comm": "apt-get", "orphan": False, "lost": 7}).encode() + b"\n"
    asked.feed(record[:10])
    assert asked.count() == 0  # half a line waits for the rest
    asked.feed(record[10:] + b"not json\n[1, 2]\n" + b"x" * 200_000)
    assert asked.count() == 8  # the record and the 7 a full pipe dropped before it
    assert asked.names() == ["deb.debian.org"]
    asked.feed(b"\n" + _lines({"name": "after.example", "orphan": False}))
    assert asked.names() == ["deb.debian.org", "after.example"] and asked.count() == 9


def test_marks_cut_spans_and_records_say_who_asked():
    asked = NamesAsked()
    asked.feed(_lines({"name": "a.example", "type": 1, "comm": "getent", "orphan": False}))
    first = asked.mark()
    assert asked.mark() == first  # no query between: the same mark
    asked.feed(_lines({"name": "a.example", "type": 28, "comm": "getent", "orphan": False},
                      {"name": "b.example", "type": 1, "comm": "sleep", "orphan": True}))
    assert asked.names(0, until=first) == ["a.example"]
    assert asked.names(first) == ["a.example", "b.example"]
    assert asked.records(first) == [
        {"name": "a.example", "type": 28, "comm": "getent", "orphan": False, "count": 1},
        {"name": "b.example", "type": 1, "comm": "sleep", "orphan": True, "count": 1}]
