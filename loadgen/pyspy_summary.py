"""Where a service's event loop spends its CPU, from a py-spy profile (docs/profile.md).

`py-spy record --gil --format raw` writes one line per distinct stack with its
sample count. This keeps the service's own thread (its stacks run from
`mbds/__main__.py`), drops the samples that wait in the selector, and prints the
functions with the most samples of their own ("self") and in total ("inclusive").
Frames are named as py-spy names them, `function (file)`, paths cut to the repository.

    python3 -m loadgen.pyspy_summary backend.txt [--top 20]
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import click

IDLE = "EpollSelector.select (selectors.py)"
MAIN = "<module> (mbds/__main__.py)"


def _short(frame: str) -> str:
    frame = re.sub(r"\(/[^()]*?/(site-packages|python3\.\d+)/", "(", frame)
    frame = re.sub(r"\(/\S*?/((backend|controller|mbds|loadgen|cli)/)", r"(\1", frame)
    return re.sub(r":\d+\)$", ")", frame)


def summarize(lines: list[str]) -> tuple[int, int, Counter[str], Counter[str]]:
    """(busy samples, idle samples, self counts, inclusive counts) of the main thread."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    busy = idle = 0
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [_short(f) for f in stack.split(";")
                  if not f.startswith(("process ", "thread "))]
        if MAIN not in frames:
            continue
        n = int(count)
        if frames[-1] == IDLE:
            idle += n
            continue
        busy += n
        own[frames[-1]] += n
        for f in set(frames):
            total[f] += n
    return busy, idle, own, total


@click.command()
@click.argument("profile", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True)
def main(profile: Path, top: int) -> None:
    """Print the top functions of one py-spy raw profile of an mbds service."""
    busy, idle, own, total = summarize(profile.read_text().splitlines())
    if not busy:
        raise click.ClickException(f"{profile}: no samples of an mbds service's main thread")
    click.echo(f"{busy} busy samples of the event-loop thread ({idle} waiting in the selector)")
    click.echo("self:")
    for f, n in own.most_common(top):
        click.echo(f"  {100 * n / busy:5.1f}%  {f}")
    click.echo("inclusive (below the frames every sample shares):")
    shown = [(f, n) for f, n in total.most_common() if n < busy][:top]
    for f, n in shown:
        click.echo(f"  {100 * n / busy:5.1f}%  {f}")


if __name__ == "__main__":
    sys.exit(main())
