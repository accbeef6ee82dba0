"""Database definitions: files, their templates and directory attributes (docs/spec.md §2).

A definition arrives as YAML (`mbds define FILE.yaml`) and travels to the
backends as `FileDef` plus the descriptors IIG allocates for it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from mbds.definition_text import load, too_deep
from mbds.errors import DefinitionError, shorten
from mbds.values import Scalar, Value

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TYPES = ("integer", "float", "string")
# FILE is every record's first keyword; BODY is the record body's result key.
RESERVED = {"FILE", "BODY", "ALL", "AND", "OR", "BY", "COMMON", "INSERT", "DELETE", "UPDATE",
            "RETRIEVE", "AVG", "COUNT", "SUM", "MIN", "MAX"}
# What one definition may hold; each bound is refused with its limit named (docs/abdl.md,
# "Database definitions").
MAX_DEFINITION = 1 << 20       # characters of definition text
MAX_FILES = 256                # files in one definition
MAX_ATTRIBUTES = 256           # attributes of one file
MAX_NAME = 128                 # characters of a file or attribute name
# A backend's table for a file has these columns besides the attributes (SQLite's names
# are case-insensitive): an attribute may not take their names.
STORAGE_COLUMNS = {"RID", "CLUSTER_ID", "_BODY"}


@dataclass(frozen=True)
class Attribute:
    name: str
    type: str                      # integer | float | string
    directory: str = ""            # "" | A | B | C
    indexed: bool = False          # a non-clustered index on every backend

    def accepts(self, value: object) -> bool:
        """Whether a keyword value fits this attribute's type (ints widen to float)."""
        if self.type == "string":
            return isinstance(value, str)
        if self.type == "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class DescriptorSpec:
    """A type-A range or type-B value given in the definition (type C has none)."""
    kind: str                      # A | B
    low: Value = None
    high: Value = None
    value: Value = None


@dataclass
class FileSchema:
    name: str
    attributes: list[Attribute]
    descriptor_specs: dict[str, list[DescriptorSpec]] = field(default_factory=dict)
    revision: int = 0              # IIG bumps it at each change of the indexes

    def __post_init__(self) -> None:
        self.by_name = {a.name: a for a in self.attributes}
        self.index = {a.name: i for i, a in enumerate(self.attributes)}
        # Cluster keys list one descriptor per directory attribute; FILE comes first.
        self.directory_attributes = ["FILE"] + [a.name for a in self.attributes if a.directory]

    @property
    def indexes(self) -> list[str]:
        return [a.name for a in self.attributes if a.indexed]

    def template(self) -> list[tuple[str, str, str]]:
        """What a stored file cannot change: names, types and directory kinds."""
        return [(a.name, a.type, a.directory) for a in self.attributes]

    def attribute(self, name: str) -> Attribute | None:
        if name == "FILE":
            return Attribute("FILE", "string", "B")
        return self.by_name.get(name)


def _too_many(what: str, count: int, unit: str, limit: int) -> DefinitionError:
    return DefinitionError(f"{what} has {count} {unit}, at most {limit} allowed")


def _ident(name: object, what: str) -> str:
    if not isinstance(name, str) or not IDENT.match(name):
        raise DefinitionError(f"{what} {shorten(repr(name))} is not an identifier (a "
                              "letter or _, then letters, digits or _)")
    if len(name) > MAX_NAME:
        raise DefinitionError(f"{what} {shorten(name)} is too long: at most {MAX_NAME} "
                              "characters allowed")
    upper = name.upper()
    if upper in RESERVED:
        raise DefinitionError(f"{what} {upper} is a reserved word")
    return upper


def _written(value: object) -> str:
    """A YAML value as a definition writes it (true, null), not as Python shows it."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return shorten(repr(value))


def _article(word: str) -> str:
    return f"an {word}" if word[0] in "aeiou" else f"a {word}"


def _typed(value: object, attr: Attribute, where: str) -> Scalar:
    if not attr.accepts(value):
        raise DefinitionError(f"{where}: {_written(value)} is not {_article(attr.type)} "
                              f"value for {attr.name}")
    if isinstance(value, float) and not math.isfinite(value):
        # NaN compares false with everything (no order, no equality); infinities are no bounds.
        raise DefinitionError(f"{where}: {value!r} is not a finite number")
    return float(value) if attr.type == "float" else value  # type: ignore[return-value,arg-type]


# What each kind of directory attribute is given: anything else (type C's `values`, a
# misspelt `range`) is refused rather than ignored.
_SPEC_KEYS = {"A": {"type", "ranges"}, "B": {"type", "values"}, "C": {"type"}}


def _directory(attr: Attribute, spec: dict[str, Any], where: str) -> list[DescriptorSpec]:
    kind = attr.directory
    extra = sorted(str(k) for k in spec if k not in _SPEC_KEYS[kind])
    if extra:
        raise DefinitionError(f"{where}: type {kind} takes no {shorten(repr(extra[0]))} "
                              f"(its keys: {', '.join(sorted(_SPEC_KEYS[kind]))})")
    if kind == "A":
        ranges = spec.get("ranges")
        if not isinstance(ranges, list) or not ranges:
            raise DefinitionError(f"{where}: type A needs a non-empty 'ranges' list of [low, high]")
        out = []
        for r in ranges:
            if not isinstance(r, list | tuple) or len(r) != 2:
                raise DefinitionError(f"{where}: range {shorten(repr(r))} is not [low, high]")
            low, high = _typed(r[0], attr, where), _typed(r[1], attr, where)
            if low > high:  # type: ignore[operator]
                raise DefinitionError(f"{where}: range [{shorten(repr(low))}, "
                                      f"{shorten(repr(high))}] has low > high")
            out.append(DescriptorSpec("A", low=low, high=high))
        out.sort(key=lambda d: d.low)  # type: ignore[arg-type,return-value]
        for a, b in zip(out, out[1:], strict=False):
            if b.low <= a.high:  # type: ignore[operator]
                shown = [shorten(repr(v)) for v in (a.low, a.high, b.low, b.high)]
                raise DefinitionError(
                    f"{where}: ranges [{shown[0]}, {shown[1]}] and [{shown[2]}, {shown[3]}] "
                    "overlap")
        return out
    if kind == "B":
        values = spec.get("values")
        if not isinstance(values, list) or not values:
            raise DefinitionError(f"{where}: type B needs a non-empty 'values' list")
        typed = [_typed(v, attr, where) for v in values]
        if len(set(typed)) != len(typed):
            raise DefinitionError(f"{where}: type B values repeat")
        return [DescriptorSpec("B", value=v) for v in typed]
    return []  # type C: sub-descriptors are created as values appear


def _indexes(file: str, raw: object, known: set[str]) -> set[str]:
    """The file's non-clustered indexes: a list of its attribute names (or none)."""
    if raw is None:
        return set()
    if not isinstance(raw, list):
        raise DefinitionError(f"file {file}: 'indexes' must be a list of attribute names")
    names = [_ident(a, f"file {file}: index attribute") for a in raw]
    for a in names:
        if a not in known:
            raise DefinitionError(f"file {file}: index attribute {a} is not an attribute")
    if len(set(names)) != len(names):
        raise DefinitionError(f"file {file}: index attributes repeat")
    return set(names)


def parse_definition(text: str) -> list[FileSchema]:
    """Parse the YAML database definition. Raises DefinitionError naming what is wrong."""
    if len(text) > MAX_DEFINITION:
        raise _too_many("the definition", len(text), "characters", MAX_DEFINITION)
    try:
        doc = load(text)    # a SafeLoader's: no Python objects
    except yaml.YAMLError as e:
        # PyYAML names its input "<unicode string>": the lines and columns say where.
        why = str(e).replace('in "<unicode string>", ', "")
        raise DefinitionError(f"definition is not valid YAML: {shorten(why, 500)}") from None
    except RecursionError:
        raise too_deep() from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict) or not doc["files"]:
        raise DefinitionError("definition must have a non-empty 'files' mapping")
    if len(doc["files"]) > MAX_FILES:
        raise _too_many("the definition", len(doc["files"]), "files", MAX_FILES)
    files: list[FileSchema] = []
    for raw_name, body in doc["files"].items():
        name = _ident(raw_name, "file name")
        if any(f.name == name for f in files):
            raise DefinitionError(f"file names repeat (case-insensitively): {name}")
        if not isinstance(body, dict) or not isinstance(body.get("attributes"), dict) \
                or not body["attributes"]:
            raise DefinitionError(f"file {name}: needs a non-empty 'attributes' mapping")
        if len(body["attributes"]) > MAX_ATTRIBUTES:
            raise _too_many(f"file {name}", len(body["attributes"]), "attributes",
                            MAX_ATTRIBUTES)
        directory = body.get("directory") or {}
        if not isinstance(directory, dict):
            raise DefinitionError(f"file {name}: 'directory' must be a mapping")
        dir_specs = {_ident(k, f"file {name}: directory attribute"): v
                     for k, v in directory.items()}
        attrs: list[Attribute] = []
        for raw_attr, typ in body["attributes"].items():
            attr_name = _ident(raw_attr, f"file {name}: attribute")
            if attr_name in STORAGE_COLUMNS:
                raise DefinitionError(f"file {name}: attribute {attr_name} is a name the "
                                      "backends' storage uses")
            if typ not in TYPES:
                raise DefinitionError(
                    f"file {name}: attribute {attr_name} has type {shorten(repr(typ))}; "
                    f"expected one of {', '.join(TYPES)}")
            kind = ""
            if attr_name in dir_specs:
                spec = dir_specs[attr_name]
                kind = str((spec or {}).get("type", "")).upper() if isinstance(spec, dict) else ""
                if kind not in ("A", "B", "C"):
                    raise DefinitionError(
                        f"file {name}: directory attribute {attr_name} needs type A, B or C")
            attrs.append(Attribute(attr_name, typ, kind))
        if len({a.name for a in attrs}) != len(attrs):
            twice = next(a.name for i, a in enumerate(attrs)
                         if a.name in {b.name for b in attrs[:i]})
            raise DefinitionError(f"file {name}: attribute {twice} is named twice "
                                  "(names are case-insensitive)")
        known = {a.name for a in attrs}
        for d in dir_specs:
            if d not in known:
                raise DefinitionError(f"file {name}: directory attribute {d} is not an attribute")
        indexed = _indexes(name, body.get("indexes"), known)
        attrs = [Attribute(a.name, a.type, a.directory, a.name in indexed) for a in attrs]
        schema = FileSchema(name, attrs)
        for a in attrs:
            if a.directory:
                schema.descriptor_specs[a.name] = _directory(
                    a, dir_specs[a.name], f"file {name}, directory attribute {a.name}")
        files.append(schema)
    return files
