"""A definition's YAML text read within bounds: no anchors or aliases, at most MAX_NODES
nodes nested at most MAX_DEPTH deep, no key written twice, and scalars typed as YAML
1.2's core schema types them (docs/abdl.md, "Database definitions")."""

from __future__ import annotations

import re
from typing import Any

import yaml

try:
    from yaml._yaml import CParser
except ImportError:          # PyYAML built without libyaml: its Python parser alone
    CParser = None  # type: ignore[assignment,misc]

from mbds.errors import DefinitionError, shorten

# Building a YAML node costs PyYAML some microseconds of Python: 1 MiB of `[0,0,…]` is half
# a million of them. A definition of 256 files of 256 attributes has some 132,000.
MAX_NODES = 1 << 18            # YAML nodes (scalars, lists, mappings) of one definition
MAX_DEPTH = 64                 # lists and mappings nested in one another


def _refuse_anchor(event: Any) -> None:
    """An alias repeats a node without repeating its text, so a few hundred bytes can
    stand for gigabytes (the "billion laughs"): YAML without anchors and aliases."""
    anchor = getattr(event, "anchor", None)
    if anchor is not None:
        kind = "alias" if isinstance(event, yaml.AliasEvent) else "anchor"
        raise DefinitionError(
            f"line {event.start_mark.line + 1}, column {event.start_mark.column + 1}: "
            f"YAML {kind} {shorten(anchor)} is not allowed in a definition (no anchors "
            "or aliases)")


def too_deep() -> DefinitionError:
    return DefinitionError("definition nests its lists or mappings too deeply (a "
                           "definition needs four levels)")


def _too_many_nodes() -> DefinitionError:
    return DefinitionError(f"the definition has more than {MAX_NODES} YAML nodes (scalars, "
                           f"lists and mappings), at most {MAX_NODES} allowed")


class _Constructor(yaml.constructor.SafeConstructor):
    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A key written twice is refused: YAML would keep the last one silently, an
        attribute's type or a file's whole definition given twice."""
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    mark = key_node.start_mark
                    raise DefinitionError(
                        f"line {mark.line + 1}, column {mark.column + 1}: key "
                        f"{shorten(repr(key))} appears twice in a mapping")
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _Resolver(yaml.resolver.Resolver):
    """How a plain scalar is typed: YAML 1.2's core schema (set below)."""


class _Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser,
              yaml.composer.Composer, _Constructor, _Resolver):
    """PyYAML in Python: used only to word a YAML syntax error as it always has (with the
    line it is on), or where libyaml is missing. It refuses what `_scan` refuses."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        _Constructor.__init__(self)
        _Resolver.__init__(self)
        self.nodes = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        _refuse_anchor(event)
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _too_many_nodes()
        nested = isinstance(event, yaml.CollectionStartEvent)
        self.depth += nested
        if self.depth > MAX_DEPTH:
            raise too_deep()
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= nested


# libyaml parses and composes in C, some 30 times faster than PyYAML's Python, with the
# same constructor and resolver; it has no hook for anchors, so `_scan` looks first.
_CLoader: Any = None
if CParser is not None:
    class _CLoader(CParser, _Constructor, _Resolver):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            CParser.__init__(self, stream)
            _Constructor.__init__(self)
            _Resolver.__init__(self)


def _scan(text: str) -> None:
    """Refuse anchors and aliases, more than MAX_NODES nodes and collections nested more
    than MAX_DEPTH deep, reading libyaml's events before anything is built."""
    nodes = depth = 0
    for event in yaml.parse(text, Loader=yaml.CSafeLoader):
        if isinstance(event, yaml.NodeEvent):
            _refuse_anchor(event)
            nodes += 1
            if nodes > MAX_NODES:
                raise _too_many_nodes()
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise too_deep()
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _data(loader: Any) -> Any:
    """The one document of `loader`'s text, as `yaml.load` reads it."""
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load(text: str) -> Any:
    """The YAML document; a YAMLError as PyYAML's Python words it."""
    if _CLoader is not None:
        try:
            _scan(text)
            return _data(_CLoader(text))
        except yaml.YAMLError:
            pass   # libyaml words it without the line it is on: Python says it again
    return _data(_Loader(text))


# Scalars as YAML 1.2's core schema reads them: booleans only true and false, integers
# decimal (a leading 0 is not octal), 0o octal and 0x hex, no base 60 (1:30) or
# underscores, floats with an exponent alone (1e5) too, and no timestamps. YAML 1.1
# reads NO (Norway) as False, 010 as 8 and 1:30 as 90.
_BOOL, _INT, _FLOAT = ("tag:yaml.org,2002:" + t for t in ("bool", "int", "float"))
_Resolver.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag == "tag:yaml.org,2002:null"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Resolver.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Resolver.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789"))
_Resolver.add_implicit_resolver(
    _FLOAT, re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+.0123456789"))


def _core_int(loader: yaml.SafeLoader, node: Any) -> int:
    text = loader.construct_scalar(node)
    base = {"0o": 8, "0x": 16}.get(text[:2], 10)
    return int(text[2:] if base != 10 else text, base)


_Constructor.add_constructor(_INT, _core_int)
