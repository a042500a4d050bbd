"""Connection settings: csctl's rules, checked before anything is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

import cosched
from cosched import transport


@pytest.mark.parametrize("address", [
    "127.0.0.1:7443", "127.1.2.3:1", "localhost:7443", "[::1]:7443",
    "127.0.0.1"])
def test_loopback_addresses(address: str) -> None:
    assert transport.is_loopback(address)


@pytest.mark.parametrize("address", [
    "10.0.0.5:7443", "csd.example.com:7443", "127.example.com:7443",
    "[2001:db8::1]:7443", "0.0.0.0:7443", "dns:///localhost:7443",
    "unix:/run/cosched/csd.sock"])
def test_other_addresses_are_not_loopback(address: str) -> None:
    assert not transport.is_loopback(address)


def test_plaintext_to_a_non_loopback_address_is_refused() -> None:
    with pytest.raises(ValueError, match=r"refusing plaintext on non-loopback "
                       r"address 10\.0\.0\.5:7443: .*insecure=True"):
        cosched.Client("10.0.0.5:7443")


def test_plaintext_to_a_non_loopback_address_with_insecure() -> None:
    # gRPC connects lazily: making the client sends nothing.
    cosched.Client("10.0.0.5:7443", insecure=True).close()


def test_unix_socket_is_plaintext_without_insecure() -> None:
    cosched.Client("unix:/run/cosched/csd.sock").close()
    cosched.Client("unix:/run/cosched/csd.sock", token="t").close()


def test_token_is_never_sent_in_plaintext_off_the_host() -> None:
    with pytest.raises(ValueError, match="refusing to send a bearer token in "
                       "plaintext to 10.0.0.5:7443"):
        cosched.Client("10.0.0.5:7443", token="secret", insecure=True)


def test_certificate_without_a_ca_is_refused() -> None:
    with pytest.raises(ValueError, match="ca_file must be set when cert_file"):
        cosched.Client("127.0.0.1:7443", cert_file="c.crt", key_file="c.key")


def test_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("")
    with pytest.raises(ValueError, match="cert_file and key_file must be set together"):
        cosched.Client("10.0.0.5:7443", ca_file=str(ca), cert_file="c.crt")


def test_unreadable_tls_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing-ca.crt"
    with pytest.raises(ValueError, match=f"ca_file {missing} cannot be read"):
        cosched.Client("10.0.0.5:7443", ca_file=str(missing))


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout 0 must be more than 0 seconds"):
        cosched.Client(timeout=0)
