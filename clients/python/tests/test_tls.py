"""Mutual TLS to a real csd: a throwaway CA made with openssl, csd's
certificate for 127.0.0.1, and client certificates whose names csd.yaml maps
to roles."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import cosched
from conftest import running_csd


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _issue(pki: Path, name: str, san: str) -> None:
    """name.crt and name.key, signed by the CA, with subject CN=name."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", cwd=pki)
    (pki / f"{name}.ext").write_text(f"subjectAltName={san}")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext",
             "-out", f"{name}.crt", cwd=pki)


@pytest.fixture(scope="module")
def tls_csd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("csd-tls")
    pki = root / "pki"
    pki.mkdir()
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-nodes", "-days", "1", "-subj", "/CN=test-ca", "-keyout", "ca.key",
             "-out", "ca.crt", cwd=pki)
    _issue(pki, "csd", "IP:127.0.0.1")
    _issue(pki, "nova-notifier", "URI:spiffe://cosched/user/nova-notifier")
    _issue(pki, "dashboard", "URI:spiffe://cosched/user/dashboard")
    settings = (
        "tls:\n"
        f"  cert_file: {pki / 'csd.crt'}\n"
        f"  key_file: {pki / 'csd.key'}\n"
        f"  ca_file: {pki / 'ca.crt'}\n"
        "plaintext_role: none\n"
        "roles:\n"
        "  - role: operator\n"
        "    common_names: [nova-notifier]\n"
        "  - role: viewer\n"
        "    spiffe_ids: [spiffe://cosched/user/dashboard]\n")
    with running_csd(root, settings) as address:
        yield address, pki


def _client(tls_csd: tuple[str, Path], name: str) -> cosched.Client:
    address, pki = tls_csd
    return cosched.Client(address, ca_file=str(pki / "ca.crt"),
                          cert_file=str(pki / f"{name}.crt"),
                          key_file=str(pki / f"{name}.key"))


def test_mutual_tls_with_a_role_from_the_certificate(tls_csd) -> None:
    with _client(tls_csd, "nova-notifier") as operator:
        assert operator.tag("vm-py-tls", "acme").changed
    with _client(tls_csd, "dashboard") as viewer:
        assert viewer.get("vm-py-tls").tenant_id == "acme"
        with pytest.raises(cosched.PermissionDenied, match="spiffe://cosched/user/dashboard"):
            viewer.untag("vm-py-tls")


def test_no_client_certificate_fails_the_handshake(tls_csd) -> None:
    address, pki = tls_csd
    with cosched.Client(address, ca_file=str(pki / "ca.crt"), timeout=5) as anonymous:
        with pytest.raises(cosched.Unavailable):
            anonymous.get("vm-py-tls")


def test_plaintext_to_a_tls_csd_fails(tls_csd) -> None:
    address, _ = tls_csd
    with cosched.Client(address, timeout=5) as plaintext:
        with pytest.raises(cosched.Unavailable):
            plaintext.get("vm-py-tls")
