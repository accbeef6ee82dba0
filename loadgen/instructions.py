"""Instructions per traffic unit of every server process, counted by valgrind.

CPU times on a shared machine move by a fifth from one run to the next; the number of
instructions a process runs for the same traffic units does not. `mbds bench fixed-cost
--instructions` starts the local cluster with the controller and every backend under
callgrind, counting off while they start, load and warm up; then counting goes on, the
units run, and each process's count (all its threads) is divided by them. The count by
shared object says whose code it is: Python's interpreter, gRPC's core, protobuf,
SQLite, libc. The kernel's part (system calls, the loopback network) is not counted.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from loadgen import paper_db as P
from loadgen.common import local_cluster_procs
from mbds.client import Client
from mbds.service import TOLD_EVERY

# Shared objects by what they are; the first name contained in an object's path wins.
LIBRARIES = (("libpython", "python"), ("cygrpc", "grpc"), ("_upb", "protobuf"),
             ("libsqlite3", "sqlite"), ("libc.so", "libc"), ("uvloop", "uvloop"))
_NAME = re.compile(r"\((\d+)\)(?: (.*))?")


def library(path: str) -> str:
    """A shared object's short name: one of LIBRARIES, or "other"."""
    return next((short for part, short in LIBRARIES if part in path), "other")


def by_library(dump: Path) -> dict[str, int]:
    """Instructions counted in a callgrind dump, summed by library (self cost: a call's
    inclusive cost, the line after `calls=`, is not counted again)."""
    names: dict[str, str] = {}
    totals: dict[str, int] = {}
    current = "other"
    after_call = False
    with dump.open() as f:
        for line in f:
            head = line[:1]
            if head.isdigit() or head in "+-*":
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                if len(fields) > 1:
                    totals[current] = totals.get(current, 0) + int(fields[1])
            elif line.startswith(("ob=", "cob=")):
                m = _NAME.match(line.split("=", 1)[1].strip())
                if m is None:
                    continue
                if m.group(2) is not None:
                    names[m.group(1)] = library(m.group(2))
                if line.startswith("ob="):
                    current = names.get(m.group(1), "other")
            elif line.startswith("calls="):
                after_call = True
    return totals


def _control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True,
                   capture_output=True, timeout=300)


def _dump(out: Path, pid: int) -> Path:
    """The dump `callgrind_control -d` asked for (written as the process gets to it)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        dumps = sorted(out.glob(f"callgrind.{pid}.*"))
        if dumps:
            time.sleep(0.2)           # written whole before it is read
            return dumps[-1]
        time.sleep(0.1)
    raise click.ClickException(f"callgrind wrote no count for process {pid}")


def measure(backends: int, text: str, units: int, warmup: int, *,
            internal_timing: bool = False, split_search_from: int = 1, scale: int = 1
            ) -> dict[str, Any]:
    """Instructions per unit of `text`, by process and library, on a fresh local cluster
    holding the paper's database at `scale`."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise click.ClickException("--instructions needs valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="mbds-callgrind-") as tmp:
        out = Path(tmp)
        prefix = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                  f"--callgrind-out-file={out}/callgrind.%p"]
        with local_cluster_procs(backends, internal_timing=internal_timing,
                                 split_search_from=split_search_from,
                                 prefix=prefix, start_timeout=300) as cluster, \
                Client(cluster.address, timeout=600) as client:
            P.load(client, scale)
            for _ in range(warmup):
                client.execute(text)
            # What the load's commits told the controller is written within TOLD_EVERY
            # (`controller/carried.py`): before counting, not among the units.
            time.sleep(TOLD_EVERY + 0.5)
            assert cluster.controller is not None
            pids = {"controller": cluster.controller.popen.pid} | {
                f"b{i}": b.popen.pid for i, b in enumerate(cluster.backends)}
            for pid in pids.values():
                _control(pid, "--instr=on")
                _control(pid, "--zero")
            for _ in range(units):
                client.execute(text)
            for pid in pids.values():
                _control(pid, "--dump=units")
            counts = {name: by_library(_dump(out, pid)) for name, pid in pids.items()}
    per_unit = {name: {lib: round(n / units) for lib, n in sorted(
        c.items(), key=lambda kv: -kv[1])} for name, c in counts.items()}
    totals = {name: sum(c.values()) // units for name, c in counts.items()}
    return {"backends": backends, "units": units,
            **{f"{name}_instructions": n for name, n in totals.items()},
            "backend_instructions_max": max(n for name, n in totals.items()
                                            if name != "controller"),
            "by_library": per_unit}
