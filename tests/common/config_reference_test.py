#!/usr/bin/python3
"""The configuration references cannot drift: csd.yaml(5), cs-agent.yaml(5)
and csctl.yaml(5) in docs/man are what scripts/config_reference.py makes
from proto/cosched/v1/config.proto, and every key the shipped files of
deploy/config set or show commented out is one the reference lists.

Usage: config_reference_test.py SOURCE_DIR
"""
import os
import re
import subprocess
import sys
import unittest

import yaml

SOURCE = None


def reference(page):
    """The key paths a page lists (".B key" after ".TP"), and those of them
    that are free-form mappings (whose keys are the operator's)."""
    keys, maps = set(), set()
    lines = open(page).read().split("\n")
    for i, line in enumerate(lines):
        if line == ".TP" and i + 2 < len(lines) and lines[i + 1].startswith(".B "):
            key = lines[i + 1][3:].replace("\\-", "-")
            keys.add(key)
            if lines[i + 2].startswith("(a mapping of "):
                maps.add(key)
    return keys, maps


def reference_keys(page):
    return reference(page)[0]


def key_paths(value, prefix="", maps=frozenset()):
    paths = set()
    if isinstance(value, dict):
        for k, v in value.items():
            path = f"{prefix}{k}"
            paths.add(path)
            if path not in maps:
                paths |= key_paths(v, path + ".", maps)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict):
                paths |= key_paths(item, prefix[:-1] + "[].", maps)
    return paths


# A commented-out setting: "#", then the YAML line as it would be written.
COMMENTED = re.compile(r"^(\s*)#( ?)(\s*)((?:- )?[a-z_]+:(?:\s.*)?)$")


def uncommented(text):
    """The file with its commented-out settings put back (prose stays out)."""
    out = []
    for line in text.split("\n"):
        m = COMMENTED.match(line)
        if m:
            out.append(m.group(1) + m.group(3) + m.group(4))
        elif not line.lstrip().startswith("#"):
            out.append(line)
    return "\n".join(out)


class ConfigReferenceTest(unittest.TestCase):
    def test_the_pages_are_made_from_the_proto(self):
        r = subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "scripts", "config_reference.py"),
                            os.path.join(SOURCE, "proto", "cosched", "v1", "config.proto"), "--check",
                            os.path.join(SOURCE, "docs", "man")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_every_key_of_the_shipped_files_is_in_the_reference(self):
        for name in ("csd.yaml", "cs-agent.yaml", "csctl.yaml"):
            with self.subTest(name):
                known, maps = reference(os.path.join(SOURCE, "docs", "man", name + ".5"))
                text = open(os.path.join(SOURCE, "deploy", "config", name)).read()
                used = key_paths(yaml.safe_load(text) or {}, maps=maps)
                self.assertTrue(used <= known, f"{name} sets keys the reference lacks: {sorted(used - known)}")
                shown = key_paths(yaml.safe_load(uncommented(text)) or {}, maps=maps)
                self.assertGreater(len(shown), len(used), f"{name}: no commented-out settings found")
                self.assertTrue(shown <= known,
                                f"{name} shows commented-out keys the reference lacks: "
                                f"{sorted(shown - known)}")

    def test_a_key_the_proto_lacks_is_caught(self):
        known = reference_keys(os.path.join(SOURCE, "docs", "man", "csd.yaml.5"))
        self.assertIn("store.etcd.max_txn_ops", known)
        self.assertIn("roles[].spiffe_ids", known)
        self.assertNotIn("store.etcd.max_txn_op", known)
        self.assertEqual(key_paths(yaml.safe_load(uncommented("# roles:\n#   - role: x\n"))),
                         {"roles", "roles[].role"})


if __name__ == "__main__":
    SOURCE = os.path.abspath(sys.argv.pop(1))
    unittest.main()
