"""Fault injection at named points of the commit protocol, for tests of atomicity.

A process started with MBDS_FAULTS="point=action[,point=action…]" acts at those points:
`crash` ends the process at once (as SIGKILL would: nothing flushed, no goodbye on
any stream), `error` makes the step fail as an exception would, `stall` stops the
thread there for STALL_S seconds (as a paused process would be; MBDS_FAULTS_STALL_S sets
them), saying so on stderr first, so a test can act while it waits. Unset, a point costs
one set lookup.
"""

from __future__ import annotations

import os
import sys
import time

POINTS = (
    "backend.before_define",        # a definition's files are being stored (writer's job)
    "backend.before_define_vote",   # a definition's files stored, marked pending; no vote yet
    "backend.apply_directory",      # directory entries pushed outside bus order arrive
    "backend.before_prepare",       # written in the writer's transaction, not yet durable
    "backend.before_vote",          # prepared durably; "prepared" not yet sent
    "backend.after_vote",           # "prepared" is queued for PP; the decision has not come
    "backend.before_commit",        # PP's commit has come; the unit is not yet forgotten
    "backend.after_commit",         # forgotten here; "forgotten" not yet sent
    "backend.before_roll_back",     # a prepared unit (a write, a definition) to undo; not yet
    "backend.one_phase_committed",  # a one-phase unit durable here; "committed" not yet sent
    "controller.before_decision",   # every vote is in; the decision is not yet written
    "controller.after_decision",    # the decision is on disk; no Commit sent yet
    "controller.mid_commit",        # Commit sent to the first prepared backend only
    "controller.before_bus_open",   # every backend met and up to date; no bus opened yet
)
ACTIONS = ("crash", "error", "stall")
STALL_S = float(os.environ.get("MBDS_FAULTS_STALL_S", "3.0"))


class FaultInjected(RuntimeError):
    """An `error` fault at a named point."""


def parse(spec: str) -> dict[str, str]:
    """`point=action,…` checked against the known points and actions."""
    out: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        point, _, action = item.partition("=")
        if point not in POINTS or action not in ACTIONS:
            raise ValueError(f"MBDS_FAULTS: {item!r} is not point=action with a point of "
                             f"{', '.join(POINTS)} and an action of {', '.join(ACTIONS)}")
        out[point] = action
    return out


_ACTIVE = parse(os.environ.get("MBDS_FAULTS", ""))


def armed(point: str) -> bool:
    return point in _ACTIVE


def hit(point: str) -> None:
    """Act if a fault is set at `point`."""
    action = _ACTIVE.get(point)
    if action == "crash":
        os._exit(137)
    if action == "error":
        raise FaultInjected(f"fault injected at {point}")
    if action == "stall":
        print(f"fault injected at {point}: stalling {STALL_S:g} s", file=sys.stderr,
              flush=True)
        time.sleep(STALL_S)
