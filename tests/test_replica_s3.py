"""A Litestream replica in an S3-compatible store (issue 42): moto's S3 server (moto[server],
in [dev]) as a real separate process on a loopback port, `flowctl replicate
s3://bucket/db?endpoint=...` beside a daemon, everything killed with SIGKILL, `flowctl
restore` from the bucket and a daemon on the restored file finishing the work; over HTTPS
too, the server's certificate trusted through AWS_CA_BUNDLE.

Credentials come from the environment only: the test's own, which no log may print. No
internet; never skipped, in CI or not (moto and boto3 are imported, not looked for)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.helpers import query, wait_until
from tests.test_replica import FLOW, RUNS, drill, finish, flowctl, kill_group, spawn

SECRET = "moto-secret-never-printed"
BUCKET = "flowctl-replica"


@dataclass(frozen=True)
class Server:
    endpoint: str
    process: subprocess.Popen[bytes]

    def keys(self, prefix: str) -> list[str]:
        s3 = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
        return [o["Key"] for o in listed.get("Contents", [])]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def moto_server(tmp_path: Path, scheme: str, *tls: str) -> Iterator[Server]:
    """moto's S3 server on a free loopback port, a bucket in it, until the test ends."""
    port = free_port()
    with open(tmp_path / "moto.log", "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port), *tls],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: process.poll() is not None or listening(port), timeout=30)
        assert process.poll() is None, (tmp_path / "moto.log").read_text()
        server = Server(f"{scheme}://127.0.0.1:{port}", process)
        s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        yield server
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test credentials in the environment, inherited by every flowctl child (and by
    Litestream from it); no profile or shared file is read in their place."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "moto-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "LITESTREAM_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def moto(tmp_path: Path, credentials: None) -> Iterator[Server]:
    with moto_server(tmp_path, "http") as server:
        yield server


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "moto-cert.pem", tmp_path / "moto-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def no_secret_printed(tmp_path: Path) -> None:
    for log in tmp_path.glob("*.log"):
        assert SECRET not in log.read_text(errors="replace"), log.name


@pytest.mark.crash
def test_sigkill_everything_then_restore_from_s3_and_finish_the_work(
    tmp_path: Path, moto: Server
) -> None:
    dest = f"s3://{BUCKET}/db?endpoint={moto.endpoint}"
    drill(tmp_path, dest, lambda: any(k.endswith(".ltx") for k in moto.keys("db/")))
    every = moto.keys("")
    assert every and all(k.startswith("db/") and k.endswith(".ltx") for k in every), every
    no_secret_printed(tmp_path)


def test_restore_from_an_empty_s3_path_fails_in_one_line(tmp_path: Path, moto: Server) -> None:
    target = tmp_path / "new.db"
    done = flowctl("restore", f"s3://{BUCKET}/nothing?endpoint={moto.endpoint}", str(target))
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert not target.exists() and SECRET not in done.stderr + done.stdout


@pytest.mark.crash
def test_replicate_and_restore_over_https_with_aws_ca_bundle(
    tmp_path: Path, credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's own certificate, trusted only through AWS_CA_BUNDLE: Litestream could
    not start its S3 client with that variable set, and without the bundle it would refuse
    the certificate, so this passes only if the bundle reaches it (as SSL_CERT_FILE)."""
    cert, key = self_signed(tmp_path)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(cert))
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with moto_server(tmp_path, "https", "-c", str(cert), "-k", str(key)) as server:
        flow = tmp_path / "drill.py"
        flow.write_text(FLOW)
        db, restored = tmp_path / "f.db", tmp_path / "restored.db"
        lines = "".join(json.dumps({"n": n}) + "\n" for n in range(1, RUNS + 1))
        queued = flowctl(
            "--db", str(db), "run", f"{flow}:drill", "--detach", "--input-file", "-", stdin=lines
        )
        assert queued.returncode == 0, queued.stderr
        dest = f"s3://{BUCKET}/tls?endpoint={server.endpoint}"
        replica = spawn(db, tmp_path / "replica.log", "replicate", dest, "--sync-interval", "200ms")
        try:
            wait_until(lambda: any(k.endswith(".ltx") for k in server.keys("tls/")), timeout=30)
        finally:
            kill_group(replica)
        done = flowctl("restore", dest, str(restored), "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["runs"] == RUNS
        assert query(restored, "SELECT COUNT(*) FROM runs WHERE status = 'queued'") == [(RUNS,)]
        finish(tmp_path, restored)
    no_secret_printed(tmp_path)
