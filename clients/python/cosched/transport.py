"""How a Client reaches csd: csctl's rules (cli/server_address.cc,
common/transport.cc), so a script is never less careful than csctl.

- Mutual TLS when ca_file is set (with cert_file and key_file for the
  client certificate csd requires).
- Else plaintext, only to loopback (127.0.0.0/8, ::1, localhost) or a Unix
  socket (unix:PATH), or anywhere with insecure=True.
- A bearer token is never sent in plaintext off the host, even with
  insecure=True.
"""

from __future__ import annotations

import ipaddress

import grpc

DEFAULT_SERVER = "127.0.0.1:7443"


def _host_part(address: str) -> str:
    if address.startswith("["):
        end = address.find("]")
        return address if end < 0 else address[1:end]
    colon = address.rfind(":")
    return address if colon < 0 else address[:colon]


def is_loopback(address: str) -> bool:
    """True for numeric 127.0.0.0/8 and ::1 addresses and for localhost,
    with or without a port; a name such as 127.example.com is not one."""
    host = _host_part(address)
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_local(address: str) -> bool:
    """Loopback, or a Unix socket (unix:PATH or unix:///PATH): a plaintext
    connection that never leaves the host."""
    return address.startswith("unix:") or is_loopback(address)


def _read(field: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"{field} {path} cannot be read: {e.strerror}") from e


def channel_credentials(
    server: str,
    ca_file: str | None,
    cert_file: str | None,
    key_file: str | None,
    token: str | None,
    insecure: bool,
) -> grpc.ChannelCredentials | None:
    """TLS credentials, or None for plaintext. ValueError naming the
    setting when the combination is refused or a file cannot be read.

    The files are read once: a Client made after a certificate is renewed
    uses the new one (csctl re-reads them; a long-lived script should make
    a new Client after a renewal).
    """
    if not ca_file and (cert_file or key_file):
        raise ValueError(
            "ca_file must be set when cert_file or key_file is: without it "
            "the connection would be plaintext and the certificate unused")
    if bool(cert_file) != bool(key_file):
        raise ValueError("cert_file and key_file must be set together")
    if ca_file:
        return grpc.ssl_channel_credentials(
            root_certificates=_read("ca_file", ca_file),
            private_key=_read("key_file", key_file) if key_file else None,
            certificate_chain=_read("cert_file", cert_file) if cert_file else None)
    if token and not is_local(server):
        raise ValueError(
            f"refusing to send a bearer token in plaintext to {server}: "
            "use TLS (ca_file)")
    if not insecure and not is_local(server):
        raise ValueError(
            f"refusing plaintext on non-loopback address {server}: give "
            "ca_file, cert_file and key_file (mutual TLS) or insecure=True")
    return None
