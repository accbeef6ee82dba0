"""`mbds up` serves Prometheus /metrics for the controller and every backend by default,
on free loopback ports, and prints where; `--no-metrics` serves none. Driven as a user
would: a real `mbds up` subprocess, its printed addresses scraped over HTTP."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from mbds.client import Client
from tests.lines import OutputLines

METRICS_LINE = re.compile(r"metrics (\S+) (http://\S+)$")


def start_up(data: Path, *args: str) -> tuple[subprocess.Popen, OutputLines, list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mbds", "up", "--backends", "2", "--port", "0",
         "--data-dir", str(data), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    lines = OutputLines(proc)
    out = lines.until("ready", 90)
    if not out or "ready" not in out[-1]:
        proc.kill()
        raise AssertionError("mbds up did not become ready:\n" + "".join(out))
    return proc, lines, out


def stop(proc: subprocess.Popen, out: list[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0, "".join(out)


def controller_address(out: list[str]) -> str:
    [addr] = [m.group(1) for line in out if (m := re.match(r"controller (\S+) ", line))]
    return addr


def listening_ports(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket the process tree of `pid` listens on."""
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return {(c.laddr.ip, c.laddr.port) for p in procs for c in p.net_connections("tcp")
            if c.status == psutil.CONN_LISTEN}


def test_up_serves_metrics_for_every_process_by_default(tmp_path: Path) -> None:
    proc, _lines, out = start_up(tmp_path / "data")
    try:
        printed = dict(m.groups() for line in out if (m := METRICS_LINE.match(line.strip())))
        assert sorted(printed) == ["b0", "b1", "controller"], "".join(out)
        ports = {urllib.parse.urlsplit(u).port for u in printed.values()}
        assert len(ports) == 3 and 0 not in ports and None not in ports
        for name, url in printed.items():
            parts = urllib.parse.urlsplit(url)
            assert parts.hostname == "127.0.0.1" and parts.path == "/metrics", url
            with urllib.request.urlopen(url, timeout=10) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/plain"), name
                text = resp.read().decode()
            names = {f.name for f in text_string_to_metric_families(text)}
            # Every process serves MBDS's own families, not only the client's defaults.
            assert any(n.startswith("mbds_") for n in names), f"{name}: {sorted(names)}"
        # Bound on loopback only, and these are the ports the controller reports.
        listening = listening_ports(proc.pid)
        for url in printed.values():
            port = urllib.parse.urlsplit(url).port
            assert {ip for ip, p in listening if p == port} == {"127.0.0.1"}, listening
        with Client(controller_address(out)) as c:
            s = c.status()
        assert {s.metrics_url, *(b.metrics_url for b in s.backends)} == set(printed.values())
    finally:
        stop(proc, out)


def test_no_metrics_serves_none(tmp_path: Path) -> None:
    proc, _lines, out = start_up(tmp_path / "data", "--no-metrics")
    try:
        assert not [line for line in out if METRICS_LINE.match(line.strip())], "".join(out)
        with Client(controller_address(out)) as c:
            s = c.status()
        assert s.metrics_url == "" and [b.metrics_url for b in s.backends] == ["", ""]
    finally:
        stop(proc, out)


def test_metrics_port_and_no_metrics_conflict(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "mbds", "up", "--metrics-port", "9500",
                        "--no-metrics", "--data-dir", str(tmp_path / "data")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--no-metrics" in r.stderr, r.stderr
    assert not (tmp_path / "data").exists()          # refused before anything started
