#!/usr/bin/env python3
"""Writes the binary seeds of fuzz/corpus/: ring-buffer pages, format texts
with a page, RPC request sessions and agent state files. Run from fuzz/ with
protoc on PATH (it encodes the protos from their text format):
    python3 corpus/make_binary_seeds.py
"""
import os
import re
import struct
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(ROOT, "..", "proto")


def write(target, name, data):
    path = os.path.join(ROOT, "corpus", target, name)
    with open(path, "wb") as f:
        f.write(data)


def encode(message, text):
    """A cosched.v1 message from its text format, serialized."""
    return subprocess.run(
        ["protoc", "-I", PROTO_DIR, "--encode=cosched.v1." + message,
         "cosched/v1/agent.proto", "cosched/v1/control_plane.proto"],
        input=text.encode(), capture_output=True, check=True).stdout


# The layouts of tests/telemetry/trace_fixtures.h (Linux 6.12, x86-64).
fixtures = open(os.path.join(ROOT, "..", "tests", "telemetry", "trace_fixtures.h")).read()
SCHED_SWITCH_FORMAT = re.search(r'kSchedSwitchFormat = R"\((.*?)\)";', fixtures, re.S).group(1)
HEADER_PAGE = re.search(r'kHeaderPage = R"\((.*?)\)";', fixtures, re.S).group(1)
SCHED_SWITCH_ID = 316


def sched_switch(prev_pid, prev_comm, prev_state, next_pid, next_comm):
    rec = bytearray(64)
    struct.pack_into("<H", rec, 0, SCHED_SWITCH_ID)
    rec[8:8 + len(prev_comm)] = prev_comm
    struct.pack_into("<i", rec, 24, prev_pid)
    struct.pack_into("<q", rec, 32, prev_state)
    rec[40:40 + len(next_comm)] = next_comm
    struct.pack_into("<i", rec, 56, next_pid)
    return bytes(rec)


def page(ts, records, size, missed=False, pad_end=True):
    """records: (kind, delta, payload) with kind data, extend or discard."""
    data = bytearray()
    for kind, delta, payload in records:
        if kind == "data":
            data += struct.pack("<I", len(payload) // 4 | delta << 5) + payload
        elif kind == "long":  # a length word after the header
            data += struct.pack("<II", 0 | delta << 5, len(payload) + 4) + payload
        elif kind == "extend":
            data += struct.pack("<II", 30 | (delta & (1 << 27) - 1) << 5, delta >> 27)
        elif kind == "discard":
            data += struct.pack("<II", 29 | 1 << 5, len(payload)) + payload
    commit = len(data)
    if pad_end:
        data += struct.pack("<I", 29)
        commit = len(data)
    body = struct.pack("<QQ", ts, commit | (1 << 31 if missed else 0)) + data
    assert len(body) <= size, (len(body), size)
    return body + bytes(size - len(body))


def ring_buffer_seeds():
    vcpu0 = sched_switch(0, b"swapper/0", 0, 73, b"CPU 0/KVM")
    back = sched_switch(73, b"CPU 0/KVM", 1, 0, b"swapper/0")
    host = sched_switch(0, b"swapper/4", 0, 120, b"kworker/4:1")
    other = struct.pack("<H", 17) + bytes(30)  # another event type
    p0 = page(1_000_000, [("data", 0, vcpu0), ("data", 5000, back), ("data", 10, other),
                          ("extend", 1 << 28, b""), ("data", 7, vcpu0)], 512)
    p1 = page(1_000_100, [("data", 0, host), ("long", 20, vcpu0),
                          ("discard", 0, bytes(12)), ("data", 3, back)], 512, missed=True)
    # Byte 0 & 3 == 3: 512-byte pages (fuzz/ring_buffer_fuzz.cc); page i is CPU i.
    write("ring_buffer_fuzz", "two_cpus", b"\x03" + p0 + p1 + p0[:100])
    write("ring_buffer_fuzz", "small_pages", b"\x01" + page(5, [("data", 1, vcpu0)], 128) +
          page(6, [("data", 1, back)], 128, pad_end=False))
    write("event_format_fuzz", "real_kernel",
          HEADER_PAGE.encode() + b"\0" + SCHED_SWITCH_FORMAT.encode() + b"\0" +
          page(9, [("data", 0, vcpu0), ("data", 1, back)], 256))


def session(calls):
    """rpc_fuzz input: [method][length LE16][request] per call."""
    out = bytearray()
    for method, message, text in calls:
        body = encode(message, text)
        out += bytes([method]) + struct.pack("<H", len(body)) + body
    return bytes(out)


# fuzz/rpc_fuzz.cc's method numbers.
TAG, UNTAG, GET_VM, LIST_VMS, SET_POLICY, GET_POLICY, LIST_POLICIES, LIST_HOSTS, \
    GET_HOST, REGISTER, REPORT, WATCH, GET_STATS, LIST_AUDIT, PLACE, EXPLAIN = range(16)


def rpc_seeds():
    register = (REGISTER, "RegisterRequest",
                'host_id: "hv-1" agent_version: "0.1.0" '
                'topology { cores { cpus: 0 cpus: 2 core_id: 0 } cores { cpus: 1 cpus: 3 core_id: 1 } } '
                'capabilities { core_sched: CORE_SCHED_SUPPORT_SUPPORTED }')
    write("rpc_fuzz", "agent_session", session([
        register,
        (TAG, "TagVMRequest", 'vm_id: "vm-1" tenant_id: "shop" isolation: ISOLATION_LEVEL_TENANT '
                              'interference_classes: "avx512" thread_scope: THREAD_SCOPE_FULL'),
        (REPORT, "ReportRequest",
         'host_id: "hv-1" applied_revision: 1 '
         'vms { vm_id: "vm-1" uuid: "a4c5e430-d04a-4e7e-a5e2-ae60b295b691" '
         '  enforcement { state: ENFORCEMENT_STATE_ENFORCED threads_found: 3 threads_tagged: 3 '
         '                applied_trust_group: "shop/tenant" } } '
         'vms { vm_id: "vm-2" } '
         'stats { start_unix_ns: 1000 end_unix_ns: 2000 events: 40 lost_events: 1 '
         '  vms { vm_id: "vm-1" share { run_ns: 900 same_ns: 400 idle_ns: 300 foreign_ns: 200 } } '
         '  cores { core: 0 both_busy_ns: 600 one_idle_ns: 300 both_idle_ns: 100 } } '
         'dropped_windows: 2'),
        (WATCH, "WatchAssignmentsRequest", 'host_id: "hv-1" resume_revision: 1'),
        (WATCH, "WatchAssignmentsRequest", 'host_id: "hv-1"'),
        (GET_VM, "GetVMRequest", 'vm_id: "vm-1"'),
        (GET_HOST, "GetHostRequest", 'host_id: "hv-1"'),
    ]))
    write("rpc_fuzz", "control_plane", session([
        (SET_POLICY, "SetTenantPolicyRequest",
         'policy { tenant_id: "shop" default_isolation: ISOLATION_LEVEL_VM '
         'allowed_isolation: ISOLATION_LEVEL_VM allowed_isolation: ISOLATION_LEVEL_TENANT }'),
        (TAG, "TagVMRequest", 'vm_id: "vm-2" tenant_id: "shop"'),
        (TAG, "TagVMRequest", 'vm_id: "vm-3"'),
        (LIST_VMS, "ListVMsRequest", 'tenant_id: "shop" page_size: 1'),
        (LIST_VMS, "ListVMsRequest", 'page_token: "djE6dm0tMg=="'),
        (GET_POLICY, "GetTenantPolicyRequest", 'tenant_id: "shop"'),
        (LIST_POLICIES, "ListTenantPoliciesRequest", 'page_size: 5'),
        (LIST_HOSTS, "ListHostsRequest", ''),
        (UNTAG, "UntagVMRequest", 'vm_id: "vm-3"'),
    ]))
    nova = ('metadata { nova { version: "1.1" project_uuid: "8a3b7c6d5e4f4a3b9c2d1e0f9a8b7c6d" '
            'project_name: "acme" flavor_name: "m1.tiny" } }')
    write("rpc_fuzz", "metadata", session([
        register,
        (REPORT, "ReportRequest",
         'host_id: "hv-1" vms { vm_id: "instance-1" ' + nova + ' } '
         'vms { vm_id: "instance-2" metadata { cosched { tenant: "shop" isolation: "tenant" '
         '  interference_classes: "avx512" } } } '
         'vms { vm_id: "instance-3" metadata { cosched { tenant: "shop" isolation: "gold" } } } '
         'vms { vm_id: "instance-4" metadata { error: "cosched:tenant is given more than once" } }'),
        (GET_VM, "GetVMRequest", 'vm_id: "instance-3"'),
        (REPORT, "ReportRequest",
         'host_id: "hv-1" vms { vm_id: "instance-1" metadata { cosched { tenant: "other" } } } '
         'vms { vm_id: "instance-2" }'),
        (TAG, "TagVMRequest", 'vm_id: "instance-1" tenant_id: "ops"'),
        (LIST_AUDIT, "ListAuditRecordsRequest", 'subject: "instance-2"'),
    ]))
    write("rpc_fuzz", "placement", session([
        register,
        (SET_POLICY, "SetTenantPolicyRequest",
         'policy { tenant_id: "shop" default_isolation: ISOLATION_LEVEL_TENANT '
         'forced_idle_budget_pct: 10 }'),
        (TAG, "TagVMRequest", 'vm_id: "web-1" tenant_id: "shop" interference_classes: "web"'),
        (TAG, "TagVMRequest", 'vm_id: "gold" isolation: ISOLATION_LEVEL_DEDICATED'),
        (REPORT, "ReportRequest",
         'host_id: "hv-1" vms { vm_id: "web-1" enforcement { vcpus: 1 } } '
         'vms { vm_id: "gold" enforcement { vcpus: 2 } }'),
        (PLACE, "PlaceRequest", 'tenant_id: "shop" vcpus: 2 isolation: ISOLATION_LEVEL_DEDICATED'),
        (PLACE, "PlaceRequest", 'vcpus: 1 interference_classes: "avx512" load: 0.5 pin: false'),
        (EXPLAIN, "ExplainVMRequest", 'vm_id: "web-1"'),
        (EXPLAIN, "ExplainVMRequest", 'vm_id: "gold"'),
    ]))


def fnv1a(data):
    h = 14695981039346656037
    for b in data:
        h = ((h ^ b) * 1099511628211) & (1 << 64) - 1
    return h


def assignment_cache_seeds():
    snapshot = encode("WatchAssignmentsResponse",
                      'kind: KIND_SNAPSHOT revision: 12 '
                      'assignments { vm_id: "vm-1" tenant_id: "shop" isolation: ISOLATION_LEVEL_TENANT '
                      '  trust_group: "shop/tenant" revision: 12 thread_scope: THREAD_SCOPE_FULL } '
                      'assignments { vm_id: "vm-2" tenant_id: "default" isolation: ISOLATION_LEVEL_VM '
                      '  trust_group: "default/vm/vm-2" revision: 3 }')
    state = b"cs-agent-assignments 1 %d %x\n" % (len(snapshot), fnv1a(snapshot)) + snapshot
    # Byte 0 even: a state file (fuzz/assignment_cache_fuzz.cc).
    write("assignment_cache_fuzz", "state_file", b"\x00" + state)
    delta = encode("WatchAssignmentsResponse",
                   'kind: KIND_DELTA revision: 13 removed_vm_ids: "vm-2" '
                   'assignments { vm_id: "vm-3" isolation: ISOLATION_LEVEL_NONE revision: 13 }')
    stream = b"".join(struct.pack("<H", len(m)) + m for m in (snapshot, delta))
    write("assignment_cache_fuzz", "stream", b"\x01" + stream)


ring_buffer_seeds()
rpc_seeds()
assignment_cache_seeds()
