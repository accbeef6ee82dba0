"""The container deployment end to end: build-images.sh, docker-compose.yml, compose.sh.

Needs Docker and a Compose client (`docker compose` or docker-compose 1.29). Without
them the module is skipped — unless CI is set: there these tests must run, so they fail.
The tests on the shared three-backend stack run under each client (CI needs both);
the others under the one compose.sh picks.
The images are built (or reused) by docker/build-images.sh; MBDS_TEST_REBUILD=1 passes
--rebuild. Every stack has its own project name (mbds_test_<random>) and free host ports,
and is removed with `down -v` whatever the outcome. Clients run inside the controller
container (`docker exec ... mbds ...`), so the host needs nothing but Docker.
"""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.containers.stack import (
    BUILD_IMAGES,
    CONTROLLER,
    CONTROLLER_DEADLINE_S,
    CPU_LIMIT_NANO,
    PAPER_TABLE2,
    ROOT,
    STARTUP_S,
    V1,
    V2,
    Stack,
    backend_name,
    compose_clients,
    docker_problem,
    run,
)

pytestmark = [pytest.mark.containers, pytest.mark.timeout(1800)]

# ------------------------------------------------------------------ fixtures --

@pytest.fixture(scope="module", autouse=True)
def docker_available() -> None:
    problem = docker_problem()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{problem}; CI is set, so the container tests must run, not skip")
    pytest.skip(f"container tests need Docker and Compose: {problem} (set CI to fail instead)")


@pytest.fixture(scope="module")
def images(docker_available: None) -> None:
    """Build the images from nothing (or reuse them) exactly as a user would."""
    cmd = [str(BUILD_IMAGES)] + (["--rebuild"] if os.environ.get("MBDS_TEST_REBUILD") else [])
    t0 = time.monotonic()
    p = run(cmd, timeout=1500, check=False)
    assert p.returncode == 0, f"build-images.sh failed:\n{p.stdout[-4000:]}\n{p.stderr[-6000:]}"
    print(f"\nbuild-images.sh: {time.monotonic() - t0:.1f}s\n{p.stderr[-1500:]}")
    for image in ("mbds:latest", "mbds-base:bookworm", "mbds-prometheus:latest"):
        run(["docker", "image", "inspect", image])


@pytest.fixture(scope="module", params=[V2, V1])
def stack3(request: pytest.FixtureRequest, images: None) -> Iterator[Stack]:
    """Three backends, started as users type it (`docker compose up -d --scale
    backend=3` with Compose v2, `docker-compose up ...` with 1.29; no count given to the
    controller), with the paper's test database loaded; shared, not modified. The tests
    on it run once with each client; a client that is not installed skips them, or
    fails them where CI is set."""
    client = request.param
    if client not in compose_clients():
        problem = (f"'{client}' is not installed (docker/install-compose-v2.sh installs "
                   "Compose v2; Debian's docker-compose package is 1.29)")
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; CI is set, so both Compose clients must be tested")
        pytest.skip(problem)
    stack = Stack(client)
    try:
        stack.plain_up(3)
        out = stack.mbds(["load", "paper"]).stdout
        assert "loaded 1000 records" in out, out
        yield stack
    finally:
        stack.down()


@pytest.fixture
def stack(images: None) -> Iterator[Stack]:
    """A stack of this test's own, not started yet."""
    stack = Stack()
    try:
        yield stack
    finally:
        stack.down()


# --------------------------------------------------------------------- tests --

def test_paper_table2_on_three_backends(stack3: Stack) -> None:
    """(a) Built from nothing, plain `docker compose up -d --scale backend=3` (or
    docker-compose): the controller takes all three, and the nine requests examine and
    retrieve as Table 2."""
    # All three from the start, not admitted one by one later (a load before that
    # would have left the latecomers empty).
    log = run(["docker", "logs", stack3.controller]).stdout
    assert re.search(r"^controller listening on \S+ with 3 backends", log, re.M), log[-2000:]
    assert "event loop uvloop" in log, log[-2000:]      # the image carries uvloop
    out = stack3.mbds(["paper", "table2"], "--json", check=False)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert [r["request"] for r in rows] == list(range(1, 10)), out.stdout + out.stderr
    for r in rows:
        assert (r["clusters_examined"], r["records_retrieved"]) == PAPER_TABLE2[r["request"]], r
        assert r["match"] is True, r
    assert out.returncode == 0, out.stderr
    # The records are spread over all three backends.
    [result] = stack3.exec_json("RETRIEVE (FILE = PAPER) (INTE1)")
    per_backend = {b["backend"]: b["records"] for b in result["stats"]["backends"]}
    assert len(per_backend) == 3 and all(n > 0 for n in per_backend.values()), per_backend
    assert sum(per_backend.values()) == 1000


MOVER_YAML = "files: {MOVER: {attributes: {K: integer, C: string}, directory: {C: {type: C}}}}"


def test_update_moving_records_reaches_iig_across_containers(stack3: Stack) -> None:
    """An UPDATE of a directory attribute asks IIG (on the controller container, through
    --advertise) for the records' new cluster. On a file of its own: the new cluster
    would change what the paper's requests examine."""
    run(["docker", "exec", stack3.controller, "python", "-c",
         f"open('/tmp/mover.yaml', 'w').write({MOVER_YAML!r})"])
    stack3.mbds(["define", "/tmp/mover.yaml"])
    stack3.exec_json("[" + "; ".join(f"INSERT (<FILE, Mover>, <K, {k}>, <C, old>)"
                                     for k in range(6)) + "]")
    stack3.exec_json("UPDATE ((FILE = Mover) and (K < 3)) <C = new>")    # a new type-C value
    [moved] = stack3.exec_json("RETRIEVE ((FILE = Mover) and (C = new)) (K)")
    assert sorted(r["K"] for r in moved["records"]) == [0, 1, 2]
    assert moved["stats"]["clusters_examined"] == 1


def test_backend_cpu_limit_and_published_ports(stack3: Stack) -> None:
    """(d) Every backend replica has the CPU limit; only the controller is published,
    and only on loopback."""
    backends = stack3.containers("backend")
    assert len(backends) == 3
    for c in backends:
        info = stack3.inspect(c)
        assert info["HostConfig"]["NanoCpus"] == CPU_LIMIT_NANO, info["Name"]
        assert not info["HostConfig"]["PortBindings"], info["HostConfig"]["PortBindings"]
    info = stack3.inspect(stack3.controller)
    assert [b["HostIp"] for b in info["HostConfig"]["PortBindings"]["50051/tcp"]] == [
        "127.0.0.1"]
    bound = info["NetworkSettings"]["Ports"]["50051/tcp"]
    assert bound == [{"HostIp": "127.0.0.1", "HostPort": str(stack3.mbds_port)}]
    with socket.create_connection(("127.0.0.1", stack3.mbds_port), timeout=5):
        pass


def test_each_container_holds_only_its_own_role_s_key(stack3: Stack) -> None:
    """A backend holds the CA's certificate and the backend's key pair, the controller
    the same of its own: neither holds the CA's key or the other role's key; each
    healthcheck passes with its own."""
    for container, role in [(stack3.controller, "controller"),
                            *((c, "backend") for c in stack3.containers("backend"))]:
        out = run(["docker", "exec", container, "ls", "/certs"], timeout=60)
        assert out.stdout.split() == sorted(["ca.pem", f"{role}.key", f"{role}.pem"]), (
            container, out.stdout)
        port = "50051" if role == "controller" else "50061"
        health = run(["docker", "exec", container, "mbds", "health", "--address",
                      f"localhost:{port}", *(["--of", "backend"] if role == "backend" else [])],
                     timeout=60)
        assert health.stdout.strip() == "SERVING", (container, health.stdout)


def test_prometheus_scrapes_controller_and_every_backend(stack3: Stack) -> None:
    """Prometheus finds each replica through DNS (dns_sd_configs) and scrapes it."""
    url = f"http://127.0.0.1:{stack3.prometheus_port}/api/v1/targets"
    deadline = time.monotonic() + 60
    while True:
        with urllib.request.urlopen(url, timeout=10) as r:
            targets = json.load(r)["data"]["activeTargets"]
        up = [t["labels"]["job"] for t in targets if t["health"] == "up"]
        if up.count("backend") == 3 and up.count("controller") == 1:
            return
        if time.monotonic() > deadline:
            seen = [(t["labels"], t["health"], t["lastError"]) for t in targets]
            pytest.fail(f"Prometheus targets after 60s: {seen}")
        time.sleep(2)


def member_buses(stack: Stack) -> dict[str, str]:
    """The controller's `mbds_backend_up` by backend, as Prometheus last scraped it."""
    return {s["metric"]["backend"]: s["value"][1]
            for s in stack.prometheus("query", query="mbds_backend_up")["result"]}


def wait_for(stack: Stack, what: str, done: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout:.0f}s: mbds_backend_up "
                        f"{member_buses(stack)}\n{stack.logs()}")
        time.sleep(1)


def address(container: str) -> str:
    [network] = Stack.inspect(container)["NetworkSettings"]["Networks"].values()
    return network["IPAddress"]


def test_a_stopped_replica_is_counted_down_though_it_leaves_the_targets(stack: Stack) -> None:
    """`docker stop` a backend replica: it leaves the DNS answer Prometheus finds the
    backends by, so it is no longer a target (no `up` 0 shows it), while the controller's
    `mbds_backend_up` is 0 for it and the overview's "Member backends down" counts it;
    started again and met by a request, it is counted up."""
    overview = json.loads((ROOT / "dashboards" / "json" / "overview.json").read_text())
    [expr] = [t["expr"] for p in overview["panels"] if p["title"] == "Member backends down"
              for t in p["targets"]]
    stack.plain_up(2)
    victim = stack.containers("backend")[1]
    name = backend_name(victim)

    def down() -> str:
        [sample] = stack.prometheus("query", query=expr)["result"]
        return sample["value"][1]

    def backend_targets() -> int:
        return sum(t["labels"]["job"] == "backend"
                   for t in stack.prometheus("targets")["activeTargets"])

    wait_for(stack, "both members up", lambda: list(member_buses(stack).values()) == ["1"] * 2)
    assert down() == "0"
    run(["docker", "stop", victim])
    wait_for(stack, f"{name} down",
             lambda: member_buses(stack).get(name) == "0" and down() == "1")
    wait_for(stack, "the stopped replica gone from the targets", lambda: backend_targets() == 1)
    assert down() == "1"
    run(["docker", "start", victim])
    stack.wait_container_healthy(victim)
    wait_for(stack, "a status answered",
             lambda: stack.mbds(["status"], check=False).returncode == 0)
    wait_for(stack, f"{name} up again",
             lambda: member_buses(stack).get(name) == "1" and down() == "0")


def test_replicas_back_at_one_another_s_addresses_serve_the_first_request(
        stack: Stack) -> None:
    """Both backend replicas stopped, then started in the other order: the engine gives
    each the address the other had. The first request after follows each backend to its
    new address and is served, with every record of both."""
    stack.plain_up(2)
    run(["docker", "exec", stack.controller, "python", "-c",
         f"open('/tmp/mover.yaml', 'w').write({MOVER_YAML!r})"])
    stack.mbds(["define", "/tmp/mover.yaml"])
    stack.exec_json("[" + "; ".join(f"INSERT (<FILE, Mover>, <K, {k}>, <C, c{k}>)"
                                    for k in range(6)) + "]")
    first, second = stack.containers("backend")
    was = {c: address(c) for c in (first, second)}
    wait_for(stack, "both members up", lambda: list(member_buses(stack).values()) == ["1"] * 2)
    run(["docker", "stop", first, second])
    wait_for(stack, "both buses down", lambda: list(member_buses(stack).values()) == ["0"] * 2)
    run(["docker", "start", second])
    run(["docker", "start", first])
    assert (address(first), address(second)) == (was[second], was[first]), (
        "the engine did not give the replicas one another's addresses", was)
    for c in (first, second):
        stack.wait_container_healthy(c)
    [result] = stack.exec_json("RETRIEVE (FILE = Mover) (K)")      # the first, not retried
    assert sorted(r["K"] for r in result["records"]) == list(range(6)), result
    assert sorted(b["backend"] for b in result["stats"]["backends"]) == sorted(
        backend_name(c) for c in (first, second))


# Runs in the controller container: loads the paper's database in chunks and prints
# a line per acknowledged chunk, then the error that ended the load (or `done`).
LOAD_SCRIPT = """
import json, sys
from loadgen import paper_db as P
from mbds.client import Client, ClientError
SCALE, CHUNK = {scale}, {chunk}
acked = 0
with Client("{controller}", timeout={deadline}) as c:
    try:
        c.define(P.definition_yaml(SCALE))
        for d in c.load(P.FILE, P.ATTRIBUTES, P.records(SCALE), chunk=CHUNK):
            acked += d.stats.records_retrieved
            print(json.dumps({{"acked": acked}}), flush=True)
    except ClientError as e:
        print(json.dumps({{"error": str(e), "code": e.code, "acked": acked}}), flush=True)
        sys.exit(3)
print(json.dumps({{"done": acked}}), flush=True)
"""


def test_killed_backend_during_load(stack: Stack) -> None:
    """(b) docker kill a backend mid-load: a clear error naming it, within the deadline;
    once it is back, every acknowledged record is there."""
    stack.up(3)
    victim = stack.containers("backend")[1]
    victim_name = backend_name(victim)
    victim_ip = next(iter(stack.inspect(victim)["NetworkSettings"]["Networks"].values()))[
        "IPAddress"]
    script = LOAD_SCRIPT.format(scale=20, chunk=500, controller=CONTROLLER,
                                deadline=CONTROLLER_DEADLINE_S)
    client = subprocess.Popen(["docker", "exec", "-i", stack.controller, "python", "-u", "-"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    assert client.stdin is not None and client.stdout is not None
    client.stdin.write(script)
    client.stdin.close()
    lines: queue.Queue[tuple[float, str | None]] = queue.Queue()

    def read() -> None:
        for line in client.stdout:
            lines.put((time.monotonic(), line))
        lines.put((time.monotonic(), None))
    threading.Thread(target=read, daemon=True).start()

    def next_event(timeout: float) -> tuple[float, dict[str, Any]]:
        t, line = lines.get(timeout=timeout)
        if line is None:
            return t, {"eof": True}
        try:
            return t, json.loads(line)
        except json.JSONDecodeError:
            return t, {"output": line}

    try:
        t, event = next_event(STARTUP_S)
        assert "acked" in event, f"the load did not start: {event}"
        run(["docker", "kill", victim])
        killed_at = time.monotonic()
        output = [event]
        while not {"error", "done", "eof"} & event.keys():
            t, event = next_event(CONTROLLER_DEADLINE_S + 30)
            output.append(event)
        client.wait(timeout=30)
    finally:
        if client.poll() is None:
            client.kill()
    assert "done" not in event, "the load finished before the kill: raise its scale"
    assert "eof" not in event, f"the client ended without an error: {output}"
    assert "error" in event, output
    error_after = t - killed_at
    assert error_after <= CONTROLLER_DEADLINE_S, f"error {error_after:.1f}s after the kill"
    assert "unreachable" in event["error"], event
    assert victim_name in event["error"] or victim_ip in event["error"], (
        f"the error does not name backend {victim_name} ({victim_ip}): {event['error']}")
    acked = event["acked"]
    assert acked > 0

    run(["docker", "start", victim])
    stack.wait_container_healthy(victim)
    deadline = time.monotonic() + CONTROLLER_DEADLINE_S
    errors = []
    while True:   # the controller reconnects to the restarted backend on its own
        p = stack.mbds(["exec"], "--json", "--timeout", "15",
                       f"RETRIEVE ((FILE = PAPER) and (INTE1 <= {acked})) (COUNT(INTE1))",
                       check=False)
        if p.returncode == 0:
            break
        errors.append(p.stderr.strip())
        if time.monotonic() > deadline:
            pytest.fail(f"no answer {CONTROLLER_DEADLINE_S}s after the restart: {errors}")
        time.sleep(2)
    [result] = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    assert list(result["records"][0].values()) == [acked], result
    assert victim_name in [b["backend"] for b in result["stats"]["backends"]]


def test_scale_out_from_three_to_four_backends(stack: Stack) -> None:
    """(c) 3 -> 4 backends: data and identities survive, the new backend joins and
    takes new inserts."""
    stack.up(3)
    stack.mbds(["load", "paper"])
    before = stack.backend_names()
    assert len(before) == 3

    stack.up(4)   # compose.sh: down (volume kept), then up with --scale backend=4
    after = stack.backend_names()
    assert len(after) == 4 and set(before) < set(after), (before, after)
    [new] = set(after) - set(before)
    assert stack.count("(FILE = PAPER)") == 1000

    record = ", ".join(["<FILE, PAPER>", "<INTE1, 7>", "<INTE2, 7>", "<MULTI, Scaled>",
                        *(f"<STR{i:02d}, Xxxxx>" for i in range(30))])
    inserts = stack.exec_json("[ " + "; ".join([f"INSERT ({record})"] * 8) + " ]")
    assert len(inserts) == 8
    # Each lists the backends its unit went to: all of them, or the one backend that
    # took every record when the unit committed there in one phase.
    for result in inserts:
        assert {b["backend"] for b in result["stats"]["backends"]} <= set(after), result
    on_new = sum(b["records"] for r in inserts for b in r["stats"]["backends"]
                 if b["backend"] == new)
    assert on_new > 0, inserts

    [result] = stack.exec_json("RETRIEVE ((FILE = PAPER) and (MULTI = Scaled)) (INTE1)")
    assert len(result["records"]) == 8
    per_backend = {b["backend"]: b["records"] for b in result["stats"]["backends"]}
    assert per_backend[new] > 0, per_backend


def test_a_replica_started_later_joins_without_a_restart(stack: Stack) -> None:
    """`up -d --scale backend=3` on a running 2-backend stack: the controller is left
    running and admits the new replica as it appears; new inserts reach it."""
    stack.plain_up(2)
    stack.mbds(["load", "paper"])
    controller, before = stack.controller, stack.backend_names()
    assert len(before) == 2
    stack.plain("up", "-d", "--scale", "backend=3")
    stack.wait_healthy(3)
    deadline = time.monotonic() + 60
    while len(after := stack.backend_names()) < 3:
        if time.monotonic() > deadline:
            pytest.fail(f"the third replica was not admitted within 60s: {after}\n"
                        f"{stack.logs()}")
        time.sleep(2)
    assert stack.controller == controller          # the same container, never restarted
    [new] = set(after) - set(before)
    assert stack.count("(FILE = PAPER)") == 1000
    record = ", ".join(["<FILE, PAPER>", "<INTE1, 9>", "<INTE2, 9>", "<MULTI, Joined>",
                        *(f"<STR{i:02d}, Xxxxx>" for i in range(30))])
    stack.exec_json("[ " + "; ".join([f"INSERT ({record})"] * 8) + " ]")
    [result] = stack.exec_json("RETRIEVE ((FILE = PAPER) and (MULTI = Joined)) (INTE1)")
    per_backend = {b["backend"]: b["records"] for b in result["stats"]["backends"]}
    assert len(result["records"]) == 8 and per_backend.get(new, 0) > 0, per_backend
