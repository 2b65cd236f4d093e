"""A private CA and the certificates it signs, made with `openssl` for 127.0.0.1: a server's (every TLS
test server shares it) and a client's (mutual TLS)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from audit.local.redis_server import TlsFiles


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def _signed(d: Path, name: str, cn: str, ext: str | None = None) -> None:
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}",
             "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"))  # fmt: skip
    extfile = ["-extfile", ext] if ext else []
    _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
             "-CAcreateserial", "-out", str(d / f"{name}.crt"), "-days", "2", *extfile)  # fmt: skip


def make_certs(d: Path) -> Path:
    """`d` with ca.crt/.key, server.crt/.key (for 127.0.0.1 and localhost) and client.crt/.key."""
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=audit-test-ca-{d.name}",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))  # fmt: skip
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _signed(d, "server", "127.0.0.1", str(d / "ext.cnf"))
    _signed(d, "client", "auditor")
    return d


def tls_files(certs: Path, *, auth_clients: bool = False) -> TlsFiles:
    """TLS-only servers of `certs`' CA; with `auth_clients`, they ask every client for a certificate."""
    return TlsFiles(
        certs / "server.crt", certs / "server.key", certs / "ca.crt",
        certs / "client.crt", certs / "client.key", auth_clients,
    )  # fmt: skip
