#!/usr/bin/python3
"""Tags each Nova instance in csd as it is created, and untags it when it is
deleted, from Nova's versioned notifications (instance.create.end,
instance.delete.end).

The tenant is the instance's project, so VMs of one project may share a
core where the project's policy allows level `tenant`, and never with
another project. A flavor chooses the level with the extra spec
`cosched:isolation` (vm, tenant, none, dedicated); without it the project's
default level applies.

handle_notification() is what a notification listener calls; main() feeds
it notifications as JSON, one per line on stdin, so the script runs without
oslo.messaging (docs/python-client.md shows where it plugs into a listener):

    tag_on_create.py --server csd.example.com:7443 --ca ca.crt \
        --cert nova-notifier.crt --key nova-notifier.key < notifications.jsonl
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

import cosched

LOG = logging.getLogger("cosched.tag_on_create")


def _data(nova_object: dict[str, Any]) -> dict[str, Any]:
    # Versioned payloads wrap each object's fields in "nova_object.data".
    return nova_object["nova_object.data"]


def handle_notification(client: cosched.Client, notification: dict[str, Any]) -> None:
    """Tags the instance of an instance.create.end notification, untags the
    one of instance.delete.end, and ignores every other event. KeyError for
    a payload without the fields used; cosched.Error when csd refuses."""
    event_type = notification.get("event_type")
    if event_type not in ("instance.create.end", "instance.delete.end"):
        return
    instance = _data(notification["payload"])
    uuid = instance["uuid"]
    if event_type == "instance.delete.end":
        try:
            client.untag(uuid)
        except cosched.NotFound:
            pass  # never tagged, or untagged already: nothing to undo
        return
    flavor = _data(instance["flavor"])
    isolation = (flavor.get("extra_specs") or {}).get("cosched:isolation")
    # Libvirt domains carry the instance's UUID, which csd matches a tagged
    # vm_id against when the host's agent reports the domain.
    tagged = client.tag(uuid, instance["tenant_id"], isolation=isolation)
    LOG.info("tagged %s (flavor %s) for project %s: %s, trust group %s",
             uuid, flavor["name"], instance["tenant_id"],
             cosched.isolation_name(tagged.vm.assignment.isolation),
             tagged.vm.assignment.trust_group)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="127.0.0.1:7443")
    parser.add_argument("--ca")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--token-file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    token = None
    if args.token_file:
        with open(args.token_file) as f:
            token = f.readline().strip()
    with cosched.Client(args.server, ca_file=args.ca, cert_file=args.cert,
                        key_file=args.key, token=token) as client:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                handle_notification(client, json.loads(line))
            except (cosched.Error, KeyError, ValueError) as e:
                # One bad notification must not stop the others being tagged.
                LOG.error("notification not applied: %r: %s", line[:200], e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
