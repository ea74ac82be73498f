"""The generated task families, one registry: name -> `Family`, each in a set (`shallow`, `deep`, `multi-round`).
Runs in: any Python >= 3.11, standard library only.

`FAMILIES` names every family, `SETS` the sets; `select("deep,csv-column")` expands a comma-separated mix of set and
family names (an unknown one is refused with both lists); `DEFAULT_SET` is what a run gets when it names none.
`python -m harbor_tasks.generate --list` prints them with one line each on what the agent must do.
"""

from harbor_tasks.families import deep_data, deep_debug, deep_files, multi_round, shallow
from harbor_tasks.families.instance import Family, Instance



def _summary(doc: str | None) -> str:
    """A shallow family's docstring as a summary line: `Write a value.` -> `write a value`."""
    line = (doc or "").strip().rstrip(".")
    return line[:1].lower() + line[1:]


FAMILIES: dict[str, Family] = {
    **{f.__name__.replace("_", "-"): Family(f.__name__.replace("_", "-"), "shallow", _summary(f.__doc__), f)
       for f in shallow.FAMILIES},
    **{f.name: f for module in (deep_files, deep_data, deep_debug, multi_round) for f in module.FAMILIES},
}
SETS: dict[str, list[str]] = {}
for _family in FAMILIES.values():
    SETS.setdefault(_family.set, []).append(_family.name)
DEFAULT_SET = "shallow"  # what a run generates when it names no family (the learning runs' measured world)


class UnknownFamily(ValueError):
    """A family or set name that is not in the registry; the message lists both."""


def select(spec: str | list[str] | None, key: str = "--families") -> list[str]:
    """The families a comma-separated mix of set and family names means (a list: each entry such a mix), in order,
    once each; None or empty: the default set. UnknownFamily names `key`, the unknown names, the sets and the
    families."""
    names = [n.strip() for part in ([spec] if isinstance(spec, str) else spec or []) for n in str(part).split(",")]
    names = [n for n in names if n] or [DEFAULT_SET]
    unknown = [n for n in names if n not in FAMILIES and n not in SETS]
    if unknown:
        raise UnknownFamily(f"{key}: unknown {', '.join(unknown)}; sets: {', '.join(SETS)}; families: "
                            f"{', '.join(FAMILIES)}")
    return list(dict.fromkeys(f for n in names for f in (SETS.get(n) or [n])))


__all__ = ["DEFAULT_SET", "FAMILIES", "SETS", "Family", "Instance", "UnknownFamily", "select"]
