"""The repository's own text: it speaks of the project, its links resolve, and the
committed results stay small.

Prose that dates a fact by a working period ("session 9", "s9 pooled") means nothing to
a reader of the repository; facts are dated by the calendar and named by the command
that produced them. Markdown links are the documentation's wiring: a moved page or
results folder must not leave a link behind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()

# Everywhere (code, comments, docs, data). "Session" alone stays legitimate: it is the
# client's stream RPC and controller/session.py.
DIARY_ANYWHERE = [re.compile(p, re.IGNORECASE) for p in (
    r"\bsessions? ?\d+\b",          # "session 9", "sessions 7 and 8"
    r"session\d",                   # "session8", "paper-scale100-session9b"
    r"\bs\d+[a-z]? pooled\b",       # "s9 pooled"
    r"\bs\d+[ab]\b",                # "s9a", "s8b": one run of a pair
)]
# In prose only: a bare "s9" is a diary label in a document, a plain name in code.
DIARY_IN_PROSE = [re.compile(r"\bs\d{1,2}\b")]
PROSE = {".md", ".txt", ".rst"}
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache",
             ".venv", "build", "dist", "results", "wheelhouse", "data"}
RESULTS_LIMIT = 2 * 1024 * 1024


def repository_files() -> list[Path]:
    """Files git tracks or would track (new files count before they are committed)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
        names = {n for n in out.decode().split("\0") if n}
        return sorted(p for p in (ROOT / n for n in names) if p.is_file())
    except (OSError, subprocess.SubprocessError):
        # No git (an unpacked archive): every file outside build and cache folders.
        found = []
        for top, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            found += [Path(top) / f for f in files]
        return sorted(found)


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def diary_lines(files: list[Path], root: Path = ROOT) -> list[str]:
    """`file:line: text` for every line carrying a diary label."""
    found = []
    for path in files:
        if path.resolve() == THIS:
            continue
        text = text_of(path)
        if text is None:
            continue
        patterns = DIARY_ANYWHERE + (DIARY_IN_PROSE if path.suffix in PROSE else [])
        for number, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in patterns):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()[:120]}")
    return found


FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors for a page's headings (lower case, punctuation dropped, spaces to -)."""
    slugs = set()
    for title in HEADING.findall(FENCE.sub("", markdown)):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    return slugs


def broken_links(files: list[Path], root: Path = ROOT) -> list[str]:
    """`file: target` for every relative markdown link whose file (or heading) is missing."""
    broken = []
    for path in files:
        if path.suffix != ".md":
            continue
        text = text_of(path) or ""
        prose = INLINE_CODE.sub("", FENCE.sub("", text))
        for target in LINK.findall(prose):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue                     # http:, https:, mailto:
            name, _, fragment = target.partition("#")
            dest = (path.parent / name).resolve() if name else path
            if not dest.exists():
                broken.append(f"{path.relative_to(root)}: {target}")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
                broken.append(f"{path.relative_to(root)}: {target} (no such heading)")
    return broken


def test_no_diary_labels() -> None:
    found = diary_lines(repository_files())
    assert not found, "diary labels (date facts, name them by what they are):\n" + "\n".join(found)


def test_relative_links_resolve() -> None:
    broken = broken_links(repository_files())
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_committed_results_stay_small_and_compact() -> None:
    results = [p for p in repository_files() if (ROOT / "docs" / "results") in p.parents]
    total = sum(p.stat().st_size for p in results)
    assert total < RESULTS_LIMIT, f"docs/results holds {total:,} bytes (limit {RESULTS_LIMIT:,})"
    indented = [str(p.relative_to(ROOT)) for p in results if p.suffix == ".json"
                and json.dumps(json.loads(p.read_text()), separators=(",", ":"),
                               ensure_ascii=False) != p.read_text()]
    assert not indented, "JSON not written compactly: " + ", ".join(indented)


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """Each check fires on planted examples, so a broken pattern cannot pass silently."""
    (tmp_path / "there.md").write_text("# A page\n\n## Limits\n")
    planted = tmp_path / "planted.md"
    planted.write_text(
        "# Title\n\nMeasured in session 9, see [x](missing.md), [y](#title),\n"
        "[z](#nowhere), [w](there.md#limits), [v](there.md#gone), `[c](not-a-link.md)`,\n"
        "[h](https://example.org/x.md).\n\n```\n[f](in-a-fence.md)\n```\n"
        "s9 pooled\nfrom paper-scale100-session8b\ns8a and s8b\nthe s9 runs\n"
        "a Session stream, controller/session.py, sessions are streams\n")
    code = tmp_path / "code.py"
    code.write_text("s9 = 1  # a plain name in code\nsessions = 2\n")
    assert [line.split(":")[1] for line in diary_lines([planted, code], tmp_path)] == [
        "3", "10", "11", "12", "13"]
    assert broken_links([planted], tmp_path) == [
        "planted.md: missing.md", "planted.md: #nowhere (no such heading)",
        "planted.md: there.md#gone (no such heading)"]
