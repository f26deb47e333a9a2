"""Configuration declared as data: each key with its type, default and meaning.

One declaration gives both the checks (every unknown key, wrong type or value is named, with the
closest known key or value suggested) and the reference table of docs/model-yaml.md
(scripts/gen_config_doc.py). ``check`` returns the document with every default filled in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rosettaserve.core.suggest import did_you_mean

MAX_PROBLEMS = 10  # reported at once; a file that wrong is best fixed from the top


class Problems:
    """What is wrong with a document, each naming where (``dynamic_batching.max_queue_delay``)."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.count = 0

    def add(self, where: str, what: str) -> None:
        self.count += 1
        if len(self.found) < MAX_PROBLEMS:
            self.found.append(f"{where}: {what}" if where else what)

    def __bool__(self) -> bool:
        return bool(self.found)

    def __str__(self) -> str:
        more = self.count - len(self.found)
        return "; ".join(self.found) + (f"; and {more} more" if more else "")


def shown(value: Any) -> str:
    """A value as a message shows it: ``'8' (text)``, ``1.5 (a number)``, ``[4] (a list)``."""
    kinds = {bool: "true/false", str: "text", int: "an integer", float: "a number"}
    kind = kinds.get(type(value)) or ("a list" if isinstance(value, list) else "")
    kind = kind or ("a mapping" if isinstance(value, dict) else type(value).__name__)
    text = repr(value)
    return f"{text[:60]}... ({kind})" if len(text) > 60 else f"{text} ({kind})"


class Type:
    """A key's type: ``check`` returns the value as the server uses it (or adds a problem)."""

    def describe(self) -> str:
        raise NotImplementedError

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` has this type's shape (for ``Either`` to pick a type)."""
        raise NotImplementedError

    def check(self, value: Any, where: str, problems: Problems) -> Any:
        if not self.accepts(value):
            problems.add(where, f"expected {self.describe()}, got {shown(value)}")
            return None
        return self.checked(value, where, problems)

    def checked(self, value: Any, where: str, problems: Problems) -> Any:
        return value


@dataclass(frozen=True)
class Integer(Type):
    lo: int | None = None
    hi: int | None = None

    def describe(self) -> str:
        return "an integer" + _bounds(self.lo, self.hi)

    def accepts(self, value: Any) -> bool:
        return type(value) is int

    def checked(self, value: Any, where: str, problems: Problems) -> Any:
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            problems.add(where, f"expected {self.describe()}, got {value}")
            return None
        return value


@dataclass(frozen=True)
class Number(Type):
    lo: float | None = None

    def describe(self) -> str:
        return "a number" + _bounds(self.lo, None)

    def accepts(self, value: Any) -> bool:
        return type(value) in (int, float)

    def checked(self, value: Any, where: str, problems: Problems) -> Any:
        if self.lo is not None and value < self.lo:
            problems.add(where, f"expected {self.describe()}, got {value}")
            return None
        return value


@dataclass(frozen=True)
class Text(Type):
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"one of {', '.join(self.choices)}" if self.choices else "text"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, str)

    def checked(self, value: Any, where: str, problems: Problems) -> Any:
        if self.choices and value not in self.choices:
            hint = did_you_mean(value, self.choices)
            problems.add(where, f"{value!r} is not {self.describe()}{hint}")
            return None
        return value


@dataclass(frozen=True)
class Flag(Type):
    def describe(self) -> str:
        return "true or false"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool)


@dataclass(frozen=True)
class Free(Type):
    """Anything: what it means is the reader's business (``what`` says what is expected)."""

    what: str = "anything"
    mapping: bool = False

    def describe(self) -> str:
        return self.what

    def accepts(self, value: Any) -> bool:
        return isinstance(value, dict) if self.mapping else True


@dataclass(frozen=True)
class ListOf(Type):
    item: Type
    min_len: int = 0

    def describe(self) -> str:
        least = " (at least one)" if self.min_len else ""
        return f"a list of {_plural(self.item.describe())}{least}"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, list)

    def checked(self, value: Any, where: str, problems: Problems) -> Any:
        if len(value) < self.min_len:
            problems.add(where, f"expected {self.describe()}, got an empty list")
        return [self.item.check(v, f"{where}[{i}]", problems) for i, v in enumerate(value)]


@dataclass(frozen=True)
class MapOf(Type):
    value: Type
    key_doc: str = "name"

    def describe(self) -> str:
        return f"a mapping of {self.key_doc} to {self.value.describe()}"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, dict)

    def checked(self, value: Any, where: str, problems: Problems) -> Any:
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                problems.add(where, f"keys must be text, got {shown(k)}")
            out[k] = self.value.check(v, f"{where}.{k}", problems)
        return out


@dataclass(frozen=True)
class Either(Type):
    """One of several types, picked by the value's shape (``true`` or a mapping)."""

    types: tuple[Type, ...]

    def describe(self) -> str:
        return " or ".join(t.describe() for t in self.types)

    def accepts(self, value: Any) -> bool:
        return any(t.accepts(value) for t in self.types)

    def checked(self, value: Any, where: str, problems: Problems) -> Any:
        chosen = next(t for t in self.types if t.accepts(value))
        return chosen.checked(value, where, problems)


@dataclass(frozen=True)
class Key:
    """One key: its type, its default (None: absent), what it means, how the default reads."""

    name: str
    type: Type
    doc: str
    default: Any = None
    required: bool = False
    default_doc: str = ""  # the default in words, where it is not a value (a CLI flag's, ...)


@dataclass(frozen=True)
class Section(Type):
    """A mapping with declared keys; ``one_of``: exactly one of them is given."""

    keys: tuple[Key, ...]
    what: str = "a mapping"
    one_of: bool = False

    def describe(self) -> str:
        return self.what

    def accepts(self, value: Any) -> bool:
        return isinstance(value, dict)

    def names(self) -> list[str]:
        return [k.name for k in self.keys]

    def checked(self, value: Any, where: str, problems: Problems) -> Any:
        known = self.names()
        strangers = [str(name) for name in value if name not in known]
        for name in strangers:
            unknown(name, known, where, problems)
        if self.one_of and not strangers and len(value) != 1:
            problems.add(where, f"give exactly one of {', '.join(known)}, got {shown(value)}")
        out: dict[str, Any] = {}
        for key in self.keys:
            inner = f"{where}.{key.name}" if where else key.name
            if key.name in value and value[key.name] is not None:
                out[key.name] = key.type.check(value[key.name], inner, problems)
            elif key.required:
                problems.add("", f"{inner} is required ({key.type.describe()})")
            elif not self.one_of:
                out[key.name] = key.default
        return out


def unknown(name: str, known: list[str], where: str, problems: Problems) -> None:
    """An unknown key, named with the closest known one (or the known ones, when none is close)."""
    full = f"{where}.{name}" if where else name
    hint = did_you_mean(name, known, f"{where}." if where else "")
    problems.add("", f"unknown key {full}{hint or ' (known here: ' + ', '.join(known) + ')'}")


def check(section: Section, doc: dict[str, Any]) -> tuple[dict[str, Any], Problems]:
    """``doc`` checked against ``section``: the values with defaults filled in, and problems."""
    problems = Problems()
    return section.checked(doc, "", problems), problems


def _bounds(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" from {lo} to {hi}"
    if lo is not None:
        return f" >= {lo}"
    return f" <= {hi}" if hi is not None else ""


def _plural(noun: str) -> str:
    for article in ("an ", "a "):
        if noun.startswith(article):
            word, _, rest = noun.removeprefix(article).partition(" ")
            return f"{word}s {rest}".strip()
    return noun


@dataclass(frozen=True)
class Row:
    """One line of a reference table: a key's full path, type, default and meaning."""

    path: str
    type: str
    default: str
    doc: str
    literal: bool  # the default is a value (else words: "--max-queue-size", "required")


def rows(section: Section, prefix: str = "") -> list[Row]:
    """Every key of ``section`` and of the sections inside it, for a reference table."""
    found: list[Row] = []
    for key in section.keys:
        path = prefix + key.name
        literal = not (key.required or key.default_doc or key.default is None)
        found.append(Row(path, key.type.describe(), _default_text(key), key.doc, literal))
        for inner, joint in _inner_sections(key.type):
            found.extend(rows(inner, path + joint))
    return found


def _inner_sections(kind: Type) -> list[tuple[Section, str]]:
    if isinstance(kind, Section):
        return [(kind, ".")]
    if isinstance(kind, ListOf) and isinstance(kind.item, Section):
        return [(kind.item, "[].")]
    if isinstance(kind, MapOf) and isinstance(kind.value, Section):
        return [(kind.value, f".<{kind.key_doc}>.")]
    if isinstance(kind, Either):
        return [s for t in kind.types for s in _inner_sections(t)]
    return []


def _default_text(key: Key) -> str:
    if key.required:
        return "required"
    if key.default_doc:
        return key.default_doc
    if key.default is None:
        return ""
    if isinstance(key.default, bool):
        return "true" if key.default else "false"
    return str(key.default).replace("'", "")
