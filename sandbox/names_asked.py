"""``NamesAsked``: the host's record of the names a sandbox's resolver refused, counted without a cap, kept bounded.
Runs in: any Python >= 3.11, standard library only; in the process that owns the sandbox (sandbox.core reads PID 1's
report pipe into it as the records come).

Marks (``mark``) cut the record into spans; per span it keeps how many queries came (all, and those of running
commands) and at most ``MAX_NAMES_PER_SPAN`` distinct names per kind of asker. Why: docs/sandbox.md#what-is-isolated.
"""

from __future__ import annotations

import json

MAX_NAMES_PER_SPAN = 64  # distinct names kept between two marks, for running commands and for orphans each


class _Span:
    """The queries between two marks: counts, and the first distinct (name, orphan) records with their counts."""

    __slots__ = ("start", "count", "by_commands", "records", "kept")

    def __init__(self, start: int):
        self.start = start
        self.count = 0
        self.by_commands = 0
        self.records: dict[tuple[str, bool], dict] = {}
        self.kept = {False: 0, True: 0}  # records kept per orphan flag

    def add(self, record: dict) -> None:
        self.count += 1
        labels = str(record.get("name") or "").split(".")
        while labels and labels[0].startswith("_"):  # an SRV look-up (_http._tcp.deb.debian.org): the host's
            labels.pop(0)
        name, orphan = ".".join(labels), record.get("orphan") is not False
        if not orphan:
            self.by_commands += 1
        key = (name, orphan)
        if key in self.records:
            self.records[key]["count"] += 1
        elif name and self.kept[orphan] < MAX_NAMES_PER_SPAN:
            self.kept[orphan] += 1
            self.records[key] = {"name": name, "type": record.get("type"), "comm": str(record.get("comm") or "?"),
                                 "orphan": orphan, "count": 1}


class NamesAsked:
    """Every DNS query a sandbox's resolver reported (``feed`` the pipe's bytes), cut into spans by ``mark``."""

    def __init__(self) -> None:
        self.total = 0  # queries reported (and lost in a full pipe), ever
        self._spans = [_Span(0)]
        self._buf = b""

    def feed(self, chunk: bytes) -> None:
        """Take bytes of PID 1's report pipe (JSON lines; a partial line waits for the rest)."""
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        if len(self._buf) > 1 << 16:  # no record is this long (pid1.MAX_NAME): not a record
            self._buf = b""
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict):
                continue
            lost = record.get("lost")
            if isinstance(lost, int) and lost > 0:  # queries whose records a full pipe dropped: asker unknown
                self._spans[-1].count += lost
                self.total += lost
            self._spans[-1].add(record)
            self.total += 1

    def mark(self) -> int:
        """A mark: the number of queries so far; spans start at marks."""
        if self._spans[-1].count:
            self._spans.append(_Span(self.total))
        return self.total

    def _between(self, since: int, until: int | None) -> list[_Span]:
        ends = [s.start for s in self._spans[1:]] + [self.total]
        return [s for s, end in zip(self._spans, ends) if end > since and (until is None or s.start < until)]

    def names(self, since: int = 0, commands_only: bool = False, until: int | None = None) -> list[str]:
        """The distinct names asked between the marks ``since`` and ``until`` (None: now), first-asked first;
        ``commands_only``: only those a running command's processes asked. Never empty when a
        query of that kind came (each span keeps the first names of both kinds)."""
        out: dict[str, None] = {}
        for span in self._between(since, until):
            for (name, orphan) in span.records:
                if not (commands_only and orphan):
                    out.setdefault(name)
        return list(out)

    def count(self, since: int = 0, commands_only: bool = False, until: int | None = None) -> int:
        """How many queries came between the marks (``commands_only``: from running commands' processes)."""
        return sum(s.by_commands if commands_only else s.count for s in self._between(since, until))

    def records(self, since: int = 0) -> list[dict]:
        """The distinct queries kept since the mark ``since``: ``{"name", "type", "comm", "orphan", "count"}``."""
        return [dict(r) for span in self._between(since, None) for r in span.records.values()]
