"""REQP's checks of one value against its attribute, and of an UPDATE's modifier
against every file it changes: each refusal names the line and column it found."""

from __future__ import annotations

import math

from controller.abdl import ast
from mbds.errors import SemanticError, shorten
from mbds.proto import mbds_pb2 as pb
from mbds.schema import Attribute, FileSchema
from mbds.values import INT64_MAX, INT64_MIN, Value, describe, out_of_range, to_pb


def where(pos: ast.Pos | None) -> str:
    return f"line {pos.line}, column {pos.column}: " if pos else ""


def check_value(attr: Attribute, value: Value, pos: ast.Pos | None, file: str) -> Value:
    if isinstance(value, float) and not math.isfinite(value):
        raise SemanticError(f"{where(pos)}{value!r} is not a finite number")
    if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
        raise SemanticError(f"{where(pos)}{out_of_range(value)}")
    if not attr.accepts(value):
        raise SemanticError(f"{where(pos)}type mismatch: {file}.{attr.name} is {attr.type}, "
                            f"got {describe(value)}")
    return float(value) if attr.type == "float" and isinstance(value, int | float) else value


def as_compared(value: Value, attrs: list[Attribute]) -> Value:
    """A checked literal as the files compare or store it: an integer becomes a float only
    when the attribute is a float in every file (a file's integer compares exactly with
    the integer, and SQLite stores an integer in a float column as a float)."""
    if type(value) is int and attrs and all(a.type == "float" for a in attrs):
        return float(value)
    return value


def modifier(m: ast.Modifier, files: list[FileSchema]) -> pb.Modifier:
    """An UPDATE's modifier checked against every file the query selects."""
    if m.attr == "FILE":
        raise SemanticError(f"{where(m.pos)}FILE cannot be updated")
    out = pb.Modifier(attr=m.attr)
    source_name = _copied(m, files)
    for f in files:              # every file has the target before any is read for it
        if m.attr not in f.by_name:
            raise SemanticError(f"{where(m.pos)}unknown attribute {shorten(m.attr)} in "
                                f"file {f.name}")
    for f in files:
        target = f.by_name[m.attr]
        if source_name is None:
            check_value(target, m.value, m.pos, f.name)
            to_pb(as_compared(m.value, [x.by_name[m.attr] for x in files]), out.value)
            continue
        source = f.by_name.get(source_name)
        if source is None:
            raise SemanticError(f"{where(m.pos)}unknown attribute {shorten(source_name)} "
                                f"in file {f.name}")
        out.source = source_name
        if m.arith is None:
            if source.type != target.type and not (
                    target.type == "float" and source.type == "integer"):
                raise SemanticError(f"{where(m.pos)}type mismatch: cannot copy "
                                    f"{source.type} {source_name} into {target.type} "
                                    f"{m.attr}")
            continue
        if "string" in (source.type, target.type):
            raise SemanticError(f"{where(m.pos)}arithmetic on string attribute "
                                f"{source_name if source.type == 'string' else m.attr}")
        value = m.value
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise SemanticError(f"{where(m.pos)}arithmetic needs a number, got "
                                f"{describe(value)}")
        if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
            raise SemanticError(f"{where(m.pos)}{out_of_range(value)}")
        if m.arith == "/" and value == 0:
            raise SemanticError(f"{where(m.pos)}division by zero")
        if target.type == "integer" and (source.type == "float" or isinstance(value, float)):
            raise SemanticError(f"{where(m.pos)}type mismatch: {m.attr} is integer but "
                                f"{source_name} {m.arith} {value!r} is a float")
        out.arith = m.arith
        to_pb(value, out.value)
    return out



def _copied(m: ast.Modifier, files: list[FileSchema]) -> str | None:
    """The attribute an UPDATE's modifier copies, or None when it sets a value. `<A = B>`
    copies B where B names an attribute, else sets the string B: one reading for the whole
    request, so a word that is an attribute of some of the files reached and not of others
    is refused as ambiguous rather than copied in some files and stored in the rest."""
    if not (m.bare_word and isinstance(m.value, str)):
        return m.source
    word = m.value.upper()
    having = [f.name for f in files if word in f.by_name]
    if not having:
        return None
    lacking = [f.name for f in files if word not in f.by_name]
    if lacking:
        raise SemanticError(f"{where(m.pos)}{shorten(m.value)} is an attribute of file "
                            f"{having[0]} but not of file {lacking[0]}: quote it to set the "
                            "string, or update the files one at a time")
    return word
