"""Which of gRPC's socket engines the services use, chosen before gRPC loads.

grpcio reads and writes its sockets on EventEngine's own thread pool by default, so each
message passes from a pool thread to the completion-queue poller and on to the event
loop. Two of grpcio's experiments give the sockets back to iomgr's endpoints, which
the poller thread reads itself and the sender writes inline: fewer threads woken and
less CPU per message ([docs/profile.md](../docs/profile.md#grpcs-socket-engine)).

The controller, the backends and `mbds up` (`cli/services.py`) and the benchmarks'
harness (`cli/bench.py`) set GRPC_EXPERIMENTS to IOMGR_ENDPOINTS as they start, since
gRPC reads it once, when it loads. A GRPC_EXPERIMENTS already in the environment is kept,
empty included: `GRPC_EXPERIMENTS=` runs them on gRPC's defaults. The client commands
keep gRPC's defaults: a synchronous client idle between calls has nothing polling its
sockets under iomgr, so a call after its server restarted would find the old
connection and fail, where on the defaults it reconnects.
"""

from __future__ import annotations

VARIABLE = "GRPC_EXPERIMENTS"
IOMGR_ENDPOINTS = "-event_engine_client,-event_engine_listener"
