"""The operator's commands when something is wrong, through real processes: each failure
ends with one `error:` line on stderr naming it (no traceback, none of gRPC's own log
lines), an exit code the help text gives, bounded output, and nothing changed."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509

from mbds import tls
from tests.conftest import CENSUS_YAML, Running, module_cluster

cluster = module_cluster("ops_errors", 1, setup=lambda r: r.client.define(CENSUS_YAML))

LONG = "a" * 10_000


def mbds(*args: str, env: dict[str, str] | None = None, stdin: str | None = None,
         stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess:
    """`mbds ARGS` as a command, with none of the caller's MBDS_* or GRPC_* settings but
    `env`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MBDS_", "GRPC_"))}
    return subprocess.run([sys.executable, "-m", "mbds", *args], stdout=stdout,
                          stderr=subprocess.PIPE, input=stdin, text=True, timeout=120,
                          env={**clean, **(env or {})})


def one_error(out: subprocess.CompletedProcess, code: int = 1) -> str:
    """The one line on stderr, an `error:` of bounded length, after exit code `code`."""
    assert out.returncode == code, (out.returncode, out.stderr[:2000])
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr[:2000]
    assert len(lines[0]) < 1500, lines[0][:300]
    return lines[0]


def test_certs_names_a_directory_or_file_it_cannot_make_in_one_line(tmp_path: Path
                                                                     ) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cases = [
        (["--dir", str(a_file / "sub")], "a-file/sub: Not a directory"),
        (["--dir", str(tmp_path / LONG)], " characters): File name too long"),
        (["--dir", str(tmp_path / "c"), "--tokens", str(tmp_path / "no" / "tokens")],
         "no/tokens: No such file or directory"),
        (["--dir", str(tmp_path / "c"), "--tokens", str(tmp_path / LONG)],
         "File name too long"),
        (["--dir", str(tmp_path / "c"), "--role-dir", f"backend={a_file}"],
         "a-file: File exists"),
    ]
    for args, said in cases:
        line = one_error(mbds("certs", *args))
        assert line.endswith(said), line[:300]


def test_certs_checks_every_role_dir_before_it_writes_anything(tmp_path: Path) -> None:
    for spec, code in ((f"ca={tmp_path / 'x'}", 1), ("no-equals-sign", 2)):
        out = mbds("certs", "--dir", str(tmp_path / "tls"), "--role-dir", spec)
        assert out.returncode == code, out.stderr
        assert "Traceback" not in out.stderr and out.stdout == "", out.stdout
        assert not (tmp_path / "tls").exists()     # no CA made for a command refused


def test_certs_whose_reader_leaves_does_all_its_work_and_exits_as_sigpipe_s(
        tmp_path: Path) -> None:
    """`mbds certs … | head -0`: the role's share and the tokens are written all the
    same (they were left unwritten, the command stopped at its first line, exit 1)."""
    read, write = os.pipe()
    os.close(read)
    try:
        out = mbds("certs", "--dir", str(tmp_path / "tls"), "--role-dir",
                   f"backend={tmp_path / 'b'}", "--tokens", str(tmp_path / "tokens"),
                   stdout=write)
    finally:
        os.close(write)
    assert out.returncode == 141 and out.stderr == "", (out.returncode, out.stderr)
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["backend.key",
                                                                  "backend.pem", "ca.pem"]
    lines = (tmp_path / "tokens").read_text().splitlines()
    assert [x.split()[0] for x in lines if not x.startswith("#")] == ["read", "write"]


def test_certs_refuses_a_host_no_client_could_reach_and_takes_a_unicode_name(
        tmp_path: Path) -> None:
    """A blank, a space, a line break or a name past DNS's 253 characters went into the
    certificate unsaid; a name of non-ASCII letters ended in cryptography's traceback."""
    for host in ("", "a b", "db\nexample", "x" * 300, "1.2.3.4/24"):
        out = mbds("certs", "--dir", str(tmp_path / "tls"), "--host", host)
        assert out.returncode == 2, (host, out.stderr[-2000:])
        assert "is neither a host name nor an IP address" in out.stderr, out.stderr
        assert len(out.stderr) < 1000 and not (tmp_path / "tls").exists()
    made = mbds("certs", "--dir", str(tmp_path / "tls"), "--host", "é.example",
                "--host", "10.0.0.7", "--host", "db_1")
    assert made.returncode == 0, made.stderr
    pem = (tmp_path / "tls" / "controller.pem").read_bytes()
    san = x509.load_pem_x509_certificate(pem).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert {"xn--9ca.example", "db_1"} <= set(san.get_values_for_type(x509.DNSName))
    assert ipaddress.ip_address("10.0.0.7") in san.get_values_for_type(x509.IPAddress)


@pytest.fixture
def tls_cluster(cluster_factory) -> Running:
    """A cluster whose client port serves TLS."""
    r: Running = cluster_factory(1, client_tls=True)
    assert r.cluster.ca is not None
    return r


def test_a_tls_mismatch_is_one_error_line_without_grpc_s_log_lines(
        cluster: Running, tls_cluster: Running, tmp_path: Path) -> None:
    tls.make(tmp_path / "other")                    # a CA of another cluster
    other = str(tmp_path / "other" / "ca.pem")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("files: {}\n")
    at_tls, at_plain = tls_cluster.cluster.address, cluster.cluster.address
    assert cluster.cluster.tls_dir is not None
    own_ca = str(cluster.cluster.tls_dir / "ca.pem")
    for command in (["status"], ["define", os.devnull]):
        line = one_error(mbds(*command, "--controller", at_tls, env={"MBDS_CA": other}))
        assert "is not the one that signed the controller's certificate" in line, line
        line = one_error(mbds(*command, "--controller", at_plain, env={"MBDS_CA": own_ca}))
        assert "the controller there serves plaintext, not TLS" in line, line
        line = one_error(mbds(*command, "--controller", at_tls,
                              env={"MBDS_CA": str(not_pem)}))
        assert line.endswith("holds no certificate gRPC can read: give the cluster's "
                             "ca.pem)"), line
    line = one_error(mbds("health", "--address", at_tls, "--ca", other))
    assert line.startswith(f"error: {at_tls}: UNAVAILABLE: "), line
    line = one_error(mbds("health", "--address", at_tls, "--ca", str(not_pem)))
    assert line.endswith(f"({not_pem} holds no certificate gRPC can read)"), line


def test_a_closed_standard_output_ends_a_command_quietly_with_sigpipe_s_code(
        cluster_factory) -> None:
    """`mbds status | head -0`: the reader has left before anything is written. Exit 1
    would say the controller cannot be asked (`mbds status --help`)."""
    r: Running = cluster_factory(1, metrics_port=0)
    address = r.cluster.address
    loaded = mbds("load", "paper", "--controller", address, "--no-progress")
    assert loaded.returncode == 0, loaded.stderr
    for args, stdin in ((["status"], None), (["shell"], "\\d\n"),
                        (["exec", "RETRIEVE (FILE = Paper) (INTE1)"], None),
                        (["report", "handlers", "--runs", "1"], None)):
        read, write = os.pipe()
        os.close(read)
        try:
            out = mbds(*args, "--controller", address, stdin=stdin, stdout=write)
        finally:
            os.close(write)
        assert out.returncode == 141 and out.stderr == "", (args, out.returncode,
                                                            out.stderr[:2000])


def test_health_refuses_a_timeout_no_answer_can_meet(cluster: Running) -> None:
    """0 s, a negative, NaN or a deadline past what gRPC holds would report the live
    controller as not answering (DEADLINE_EXCEEDED)."""
    address = cluster.cluster.address
    for timeout in ("0", "-1", "nan", "inf", "1e10"):
        out = mbds("health", "--address", address, "--timeout", timeout)
        assert out.returncode == 2, (timeout, out.stdout, out.stderr)
        assert "Invalid value for '--timeout'" in out.stderr, out.stderr
        assert "DEADLINE_EXCEEDED" not in out.stderr
    ok = mbds("health", "--address", address, "--timeout", "86400")
    assert ok.returncode == 0 and ok.stdout == "SERVING\n", ok.stderr


def test_an_address_of_ten_thousand_characters_is_named_cut_short(cluster: Running
                                                                   ) -> None:
    for args in (["status", "--controller", f"{LONG}:1"],
                 ["define", os.devnull, "--controller", f"{LONG}:1"],
                 ["health", "--address", f"{LONG}:1"]):
        line = one_error(mbds(*args))
        assert "… (" in line, line[:300]
    digits = "9" * 10_000            # more than int() takes from a string
    for port in (digits, "0" * 10_000 + "99999"):
        out = mbds("status", "--controller", f"127.0.0.1:{port}")
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-2000:]
        assert "a port is at most 65535" in out.stderr and len(out.stderr) < 1500
    padded = cluster.cluster.address.replace(":", ":" + "0" * 10_000)
    assert mbds("status", "--controller", padded).returncode == 0


def test_a_port_that_is_no_controller_s_client_port_is_named(cluster_factory) -> None:
    """A backend of a cluster without TLS answers a controller's call as gRPC does a
    method it has not: "Method not found!"."""
    r: Running = cluster_factory(1, tls=False)
    backend = r.cluster.backends[0].address or ""
    for args in (["status"], ["define", os.devnull]):
        line = one_error(mbds(*args, "--controller", backend))
        assert "(the process there is not a controller's client port: a backend, or a " \
            "controller's internal port?" in line, line


def test_define_reads_no_more_than_a_definition_may_hold(cluster: Running) -> None:
    """An endless input is refused once past the bound, not read until memory runs out
    (here a limit of 2 GB, under which the whole read ended in a MemoryError)."""
    command = (f"ulimit -v 2000000; exec {sys.executable} -m mbds define /dev/zero "
               f"--controller {cluster.cluster.address}")
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                         timeout=120)
    line = one_error(out)
    assert line == ("error: /dev/zero holds more than a definition may: at most 1048576 "
                    "characters"), line
    assert sorted(cluster.client.status().files) == ["CENSUS", "STATES"]


def test_the_controller_names_a_tokens_file_that_is_not_utf8(tmp_path: Path) -> None:
    """Refused at start as any other bad tokens file is, before anything listens."""
    tls.make(tmp_path / "tls")
    tokens = tmp_path / "tokens"
    tokens.write_bytes(b"read " + b"t" * 20 + b"\n\xff\n")
    out = mbds("controller", "--listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0",
               "--backends", "127.0.0.1:1", "--data-dir", str(tmp_path / "c"),
               "--tls-dir", str(tmp_path / "tls"), "--tokens", str(tokens))
    assert one_error(out) == (f"error: tokens file {tokens} is not valid UTF-8 (byte 0xff at "
                              "position 26)")


def test_a_port_past_65535_or_negative_is_refused_not_taken_modulo(cluster: Running
                                                                   ) -> None:
    """gRPC takes a port modulo 65536: `mbds health` asked the controller at its port +
    65536, or at its port - 65536, and said SERVING for an address nothing listens on."""
    port = int(cluster.cluster.address.rpartition(":")[2])
    for wrong, said in ((f"127.0.0.1:{port + 65536}", "a port is at most 65535"),
                        (f"127.0.0.1:{port - 65536}", "a port is not negative")):
        out = mbds("health", "--address", wrong)
        assert out.returncode == 2 and out.stdout == "", (wrong, out.stdout, out.stderr)
        assert f"Invalid value for '--address': {wrong}: {said}" in out.stderr, out.stderr
    out = mbds("status", "--controller", f"127.0.0.1:{port - 65536}")
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert "a port is not negative" in out.stderr, out.stderr


def test_an_output_that_cannot_be_written_is_named_in_one_line(cluster: Running,
                                                               tmp_path: Path) -> None:
    """`mbds status > f` on a full disk (/dev/full): the error, not a traceback."""
    census = tmp_path / "census.yaml"
    census.write_text(CENSUS_YAML)
    address = cluster.cluster.address
    for args, stdin in ((["status"], None), (["define", str(census)], None),
                        (["exec", "RETRIEVE (FILE = Census) (CITY)"], None),
                        (["shell"], "\\d\n")):
        fd = os.open("/dev/full", os.O_WRONLY)
        try:
            out = mbds(*args, "--controller", address, stdin=stdin, stdout=fd)
        finally:
            os.close(fd)
        assert one_error(out) == "error: No space left on device", args


def test_a_closed_standard_input_reads_as_empty(cluster: Running) -> None:
    """`mbds shell <&-` and `mbds define - <&-`, as from /dev/null: no traceback."""
    address = cluster.cluster.address

    def closed(*args: str) -> subprocess.CompletedProcess:
        command = " ".join([sys.executable, "-m", "mbds", *args, "--controller", address])
        return subprocess.run(["bash", "-c", f"exec {command} <&-"], capture_output=True,
                              text=True, timeout=120)
    shell = closed("shell")
    assert shell.returncode == 0 and shell.stdout == shell.stderr == "", shell.stderr
    define = closed("define", "-")
    assert one_error(define) == "error: definition must have a non-empty 'files' mapping"


def test_a_controller_that_does_not_answer_is_named_as_such(cluster_factory) -> None:
    """A stopped controller (SIGSTOP): `mbds status` gives up at its deadline, saying
    whom it waited for, not gRPC's two words alone."""
    import signal

    r: Running = cluster_factory(1)
    assert r.cluster.controller is not None
    r.cluster.controller.popen.send_signal(signal.SIGSTOP)
    try:
        out = mbds("status", "--controller", r.cluster.address)
    finally:
        r.cluster.controller.popen.send_signal(signal.SIGCONT)
    line = one_error(out)
    assert line.startswith("error: Deadline Exceeded (no answer from the controller in "
                           "time: is it stopped or overloaded?"), line


def test_control_characters_of_a_name_are_written_escaped(cluster: Running,
                                                          tmp_path: Path) -> None:
    """An escape sequence or a NUL repeated raw from a name would recolour or clear the
    terminal, a line break split the error line: escaped, or refused in an address."""
    address = cluster.cluster.address
    shell = mbds("shell", "--controller", address, stdin="\\d \x1b[2JX\x00Y\n")
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout == "error: line 1 of the input: unknown file \\x1b[2JX\\x00Y\n", \
        shell.stdout
    named = tmp_path / "\x1b[31mred.yaml"
    named.write_bytes(b"\xff")
    line = one_error(mbds("define", str(named), "--controller", address))
    assert line == f"error: {tmp_path}/\\x1b[31mred.yaml is not valid UTF-8 (byte 0xff at " \
                   "position 0)", line
    for command in (["status", "--controller"], ["health", "--address"]):
        out = mbds(*command, f"{address}\nx")
        assert out.returncode == 2 and out.stdout == "", out.stdout
        assert f"{address}\\nx' holds a character HOST:PORT cannot hold" in out.stderr, \
            out.stderr
