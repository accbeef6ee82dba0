"""ABDL, the attribute-based data language of MBDS: lexer, parser and syntax tree.

`parse(text)` turns one traffic unit (a request or a `[...]` transaction) into
an immutable `TrafficUnit`; malformed input raises `AbdlSyntaxError` with the
line, column, expected tokens and the token found; `parse(text, max_text)` raises
`TextTooLong` once it has read more than `max_text` characters outside record
bodies. No schema checks happen here -- that is the semantic stage's job.
"""

from controller.abdl.ast import (
    Conjunction,
    Delete,
    Insert,
    Keyword,
    Modifier,
    Pos,
    Predicate,
    Query,
    Request,
    Retrieve,
    RetrieveCommon,
    TargetItem,
    TrafficUnit,
    Update,
    Value,
)
from controller.abdl.lexer import AbdlSyntaxError, TextTooLong
from controller.abdl.parser import parse

__all__ = [
    "AbdlSyntaxError",
    "Conjunction",
    "Delete",
    "Insert",
    "Keyword",
    "Modifier",
    "Pos",
    "Predicate",
    "Query",
    "Request",
    "Retrieve",
    "RetrieveCommon",
    "TargetItem",
    "TextTooLong",
    "TrafficUnit",
    "Update",
    "Value",
    "parse",
]
