#!/usr/bin/python3
"""deploy/pki/cosched-pki: what each certificate carries, checked with openssl,
and that it never overwrites what exists.

Usage: cosched_pki_test.py PATH_TO_COSCHED_PKI
"""
import hashlib
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = None


def run(*args, cwd):
    return subprocess.run([SCRIPT, "--dir", "pki", *args], cwd=cwd, capture_output=True, text=True)


def text_of(cert):
    return subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-text"], capture_output=True,
                          text=True, check=True).stdout


def verifies(cwd, cert, purpose):
    return subprocess.run(["openssl", "verify", "-CAfile", "pki/ca.crt", "-purpose", purpose, cert],
                          cwd=cwd, capture_output=True, text=True).returncode == 0


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class CoschedPkiTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        ca = run("ca", cwd=self.dir)
        self.assertEqual(ca.returncode, 0, ca.stderr)

    def tearDown(self):
        self.tmp.cleanup()

    def path(self, *parts):
        return os.path.join(self.dir, "pki", *parts)

    def test_ca_is_made_once_and_never_overwritten(self):
        before = digest(self.path("ca.crt")), digest(self.path("ca.key"))
        again = run("ca", cwd=self.dir)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("already holds a CA", again.stderr)
        self.assertEqual((digest(self.path("ca.crt")), digest(self.path("ca.key"))), before)
        self.assertEqual(os.stat(self.path("ca.key")).st_mode & 0o777, 0o600)
        ca = text_of(self.path("ca.crt"))
        self.assertIn("CA:TRUE", ca)
        self.assertIn("Certificate Sign", ca)

    def test_a_csd_replica_serves_and_dials_under_every_address(self):
        r = run("csd", "csd-a", "csd-a.example.net", "10.0.0.21", "fd00::21", cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        cert = text_of(self.path("csd", "csd-a.crt"))
        self.assertIn("Subject: CN = csd-a", cert)
        self.assertIn("DNS:csd-a.example.net, IP Address:10.0.0.21, IP Address:FD00:0:0:0:0:0:0:21", cert)
        self.assertIn("TLS Web Server Authentication, TLS Web Client Authentication", cert)
        self.assertTrue(verifies(self.dir, "pki/csd/csd-a.crt", "sslserver"))
        self.assertTrue(verifies(self.dir, "pki/csd/csd-a.crt", "sslclient"))
        self.assertEqual(os.stat(self.path("csd", "csd-a.key")).st_mode & 0o777, 0o600)

    def test_an_agent_carries_its_hosts_spiffe_id_and_only_client_usage(self):
        r = subprocess.run([SCRIPT, "--dir", "pki", "--trust-domain", "prod", "agent", "compute-001"],
                           cwd=self.dir, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        cert = text_of(self.path("agent", "compute-001.crt"))
        self.assertIn("URI:spiffe://prod/host/compute-001", cert)
        self.assertTrue(verifies(self.dir, "pki/agent/compute-001.crt", "sslclient"))
        self.assertFalse(verifies(self.dir, "pki/agent/compute-001.crt", "sslserver"))

    def test_users_and_etcd(self):
        for args in (("user", "ops-admin"), ("etcd-client", "cosched-csd"),
                     ("etcd-member", "etcd-1", "10.0.0.11")):
            r = run(*args, cwd=self.dir)
            self.assertEqual(r.returncode, 0, r.stderr)
        user = text_of(self.path("user", "ops-admin.crt"))
        self.assertIn("Subject: CN = ops-admin", user)
        self.assertIn("URI:spiffe://cosched/user/ops-admin", user)
        self.assertIn("Subject: CN = cosched-csd", text_of(self.path("etcd", "cosched-csd.crt")))
        self.assertTrue(verifies(self.dir, "pki/etcd/etcd-1.crt", "sslserver"))

    def test_an_existing_certificate_is_kept_unless_renewed(self):
        self.assertEqual(run("agent", "hv-1", cwd=self.dir).returncode, 0)
        first = digest(self.path("agent", "hv-1.crt"))
        again = run("agent", "hv-1", cwd=self.dir)
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("exists; --renew replaces it", again.stderr)
        self.assertEqual(digest(self.path("agent", "hv-1.crt")), first)
        renewed = run("--renew", "agent", "hv-1", cwd=self.dir)
        self.assertEqual(renewed.returncode, 0, renewed.stderr)
        self.assertNotEqual(digest(self.path("agent", "hv-1.crt")), first)
        self.assertEqual(digest(self.path("agent", "hv-1.crt.old")), first)

    def test_bad_input_is_refused_naming_what_is_wrong(self):
        cases = [
            (("agent", "bad name"), "agent HOST_ID 'bad name' must be letters"),
            (("csd", "csd-a"), "csd needs a NAME and at least one ADDRESS"),
            (("csd", "csd-a", "bad/addr"), "address 'bad/addr' must be letters"),
            (("--days", "0", "user", "u"), "--days must be at least 1"),
            (("--days", "x", "user", "u"), "--days must be a whole number"),
            (("frobnicate",), "unknown command 'frobnicate'"),
            (("--nope", "ca"), "unknown option --nope"),
        ]
        for args, expected in cases:
            r = run(*args, cwd=self.dir)
            self.assertNotEqual(r.returncode, 0, args)
            self.assertIn(expected, r.stderr, args)
        self.assertFalse(os.path.exists(self.path("agent", "bad name.crt")))

    def test_nothing_is_issued_without_a_ca(self):
        with tempfile.TemporaryDirectory() as empty:
            r = run("agent", "hv-1", cwd=empty)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("no CA in pki: run 'cosched-pki --dir pki ca' first", r.stderr)


if __name__ == "__main__":
    SCRIPT = os.path.abspath(sys.argv.pop(1))
    unittest.main()
