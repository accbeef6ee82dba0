"""What a backend may send next of a traffic unit: its replies checked in order as they
arrive (`Inbox.deliver`), so one out of turn fails the unit at once."""

from __future__ import annotations

from mbds.proto import mbds_pb2 as pb

WINDOW = 8           # row batches (or groups) a backend may send of one unit ahead of PP
FINAL_KINDS = ("committed", "error")       # a backend's last reply of a unit


class Sent:
    """What one backend has sent of a unit so far, as it arrived: its request under way
    (every earlier one done), its row batches and groups against the credit granted to
    it, its vote and its last reply."""

    __slots__ = ("at", "batches", "granted", "voted", "final", "refused")

    def __init__(self) -> None:
        self.at = self.batches = self.granted = 0
        self.voted = self.refused = False
        self.final = ""

    def fault(self, msg: pb.BackendReply, kind: str | None, end: int) -> str:
        """What is wrong with `msg` coming next from this backend ("" if nothing), its
        effect recorded here; `end` is the unit's number of requests. A backend answers
        request 0, 1, ... in turn, each ending with its `done`, sends at most WINDOW row
        batches (or groups) beyond the credit returned to it, then its vote (`prepared`,
        for a definition followed by `committed`) or `committed`; `error` may come at any
        point; nothing after the last."""
        if self.final:
            return f"{kind or 'a reply with no body'} after its {self.final}"
        at = self.at
        if kind == "rows" or kind == "groups" or kind == "done":
            i = msg.request_index
            if i >= end:
                return f"{kind} for request {i}, " + (
                    f"beyond the unit's last ({end - 1})" if end
                    else "but the unit has no requests")
            if i == at:
                if kind == "done":
                    self.at = at + 1
                    return ""
                self.batches += 1
                if self.batches > WINDOW + self.granted:
                    return (f"{self.batches} row batches or groups with credit for "
                            f"{WINDOW + self.granted}")
                return ""
            if i < at:
                return f"a second done for request {i}" if kind == "done" else \
                    f"{kind} for request {i} after its done"
            return f"{kind} for request {i} before the done of request {at}"
        if kind == "error":
            self.final = kind
            return ""
        if kind == "prepared" or kind == "committed":
            if at < end:
                return f"{kind} before the done of request {at}"
            if kind == "committed":
                self.final = kind
            elif self.voted:
                return "a second prepared"
            self.voted = True
            return ""
        return f"a reply of unknown kind {kind}" if kind else "a reply with no body"
