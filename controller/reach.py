"""Which files a query's conjunction reaches (REQP): those its FILE predicates select
that have every attribute it names. A conjunction that reaches none is refused, saying
why, rather than sent to backends that could only refuse it."""

from __future__ import annotations

from controller.abdl import ast
from controller.checks import where as _where
from mbds.directory import Directory
from mbds.errors import SemanticError, shorten
from mbds.schema import FileSchema
from mbds.traffic import COMPARE
from mbds.values import describe


def file_named(directory: Directory, name: str, pos: ast.Pos | None) -> FileSchema:
    schema = directory.files.get(name.upper())
    if schema is None:
        raise SemanticError(f"{_where(pos)}unknown file {shorten(name.upper())}")
    return schema


def files_reached(directory: Directory, conj: ast.Conjunction) -> list[FileSchema]:
    """The files `conj` reaches, or a refusal naming why it reaches none."""
    files = list(directory.files.values())
    named = None
    selects: list[str] = []
    for p in conj.predicates:
        if p.attr != "FILE":
            continue
        if not isinstance(p.value, str):
            raise SemanticError(f"{_where(p.pos)}FILE is compared with a file name, "
                                f"got {describe(p.value)}")
        if p.op == "=":
            named = file_named(directory, p.value, p.pos)
        files = [f for f in files if COMPARE[p.op](f.name, p.value.upper())]
        selects.append(f"FILE {p.op} {shorten(p.value.upper())}")
    if not files and selects:
        raise SemanticError(f"{_where(conj.predicates[0].pos)}{_listed(selects)} "
                            f"select{'s' if len(selects) == 1 else ''} no file")
    attrs: list[str] = []
    for p in conj.predicates:
        if p.attr == "FILE" or p.attr in attrs:
            continue
        if named is not None and p.attr not in named.by_name:
            raise SemanticError(f"{_where(p.pos)}unknown attribute {shorten(p.attr)} in "
                                f"file {named.name}")
        if all(p.attr not in f.by_name for f in directory.files.values()):
            raise SemanticError(f"{_where(p.pos)}unknown attribute {shorten(p.attr)}: "
                                "no file has it")
        attrs.append(p.attr)
        files = [f for f in files if p.attr in f.by_name]
        if not files:
            among = f" that {_listed(selects)} select{'s' if len(selects) == 1 else ''}" \
                if selects else ""
            raise SemanticError(f"{_where(conj.predicates[0].pos)}no file{among} has "
                                f"all of {_listed([shorten(a) for a in attrs], ', ')}")
    return files


def _listed(items: list[str], sep: str = " and ") -> str:
    """`items` joined for an error message, at most three of them named."""
    shown = sep.join(items[:3])
    return shown if len(items) <= 3 else f"{shown}{sep}{len(items) - 3} more"
