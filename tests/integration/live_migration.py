#!/usr/bin/python3
"""Tools of the live-migration tests (tests/integration/live_migration_test.sh
on the build machine, tests/lab/scenarios/live_migration.sh in the lab).

  live_migration.py qmp SOCKET COMMAND [JSON_ARGUMENTS]
      One QMP command on QEMU's monitor socket; prints its return as JSON.
  live_migration.py migrate SOCKET HOST:PORT BYTES_PER_SECOND
      QEMU's own migration to a QEMU started with -incoming tcp:HOST:PORT:
      caps the bandwidth (so that the overlap lasts a few seconds), sends
      `migrate`, polls `query-migrate` until it completed; prints one JSON
      line of figures. Exit 1 when it failed or was cancelled.
  live_migration.py watch --out FILE --stop FILE [options]
      Samples what csd, the agents and the kernel say until FILE --stop
      exists; one JSON object per line. See watch_main.
  live_migration.py check --samples FILE [options]
      The verdict over the samples; prints the figures, exit 1 with every
      violation listed. See check_main.

Only the standard library: this runs as /usr/bin/python3 in the lab guest
too, where nothing is installed but what the build machine has.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import threading
import urllib.request


# --- QMP ---------------------------------------------------------------------

class Qmp:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(30)
        self.sock.connect(path)
        self.file = self.sock.makefile("rw")
        json.loads(self.file.readline())  # the greeting
        self.cmd("qmp_capabilities")

    def cmd(self, name, **arguments):
        self.file.write(json.dumps({"execute": name, "arguments": arguments}) + "\n")
        self.file.flush()
        while True:
            line = self.file.readline()
            if not line:
                if name == "quit":
                    return {}
                raise SystemExit(f"QMP {name}: the monitor closed")
            reply = json.loads(line)
            if "event" in reply:
                continue
            if "error" in reply:
                raise SystemExit(f"QMP {name}: {reply['error']}")
            return reply["return"]


def qmp_main(argv):
    path, name = argv[0], argv[1]
    arguments = json.loads(argv[2]) if len(argv) > 2 else {}
    print(json.dumps(Qmp(path).cmd(name, **arguments)))


def migrate_main(argv):
    path, dest, bandwidth = argv[0], argv[1], int(argv[2])
    qmp = Qmp(path)
    qmp.cmd("migrate-set-parameters", **{"max-bandwidth": bandwidth})
    start = time.time()
    qmp.cmd("migrate", uri=f"tcp:{dest}")
    while True:
        info = qmp.cmd("query-migrate")
        if info.get("status") in ("completed", "failed", "cancelled"):
            break
        time.sleep(0.05)
    ram = info.get("ram", {})
    print(json.dumps({
        "status": info.get("status"),
        "wall_ms": round((time.time() - start) * 1000),
        "total_time_ms": info.get("total-time"),
        "downtime_ms": info.get("downtime"),
        "transferred_bytes": ram.get("transferred"),
        "source_status": qmp.cmd("query-status").get("status"),
        "error": info.get("error-desc", ""),
    }))
    return 0 if info.get("status") == "completed" else 1


# --- sampling ----------------------------------------------------------------

def named(pairs):
    """NAME=VALUE arguments as a dict, in order."""
    out = {}
    for p in pairs or []:
        name, _, value = p.partition("=")
        out[name] = value
    return out


def alive(pid):
    """Whether PID runs (not gone, not a zombie): read after everything
    else in a sample, so that "alive" holds for the whole sample."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


def metrics(url):
    """A Prometheus text page as {'name{labels}': value}; None when it
    cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
    return out


def state_assignment(state_dir, vm, protoc, proto_dir):
    """The trust group of VM in an agent's state file (assignments.pb), ""
    when the file holds no assignment for it, None when it cannot be read.
    The file is "cs-agent-assignments 1 LENGTH CHECKSUM\\n" then a
    WatchAssignmentsResponse snapshot (agent/assignment_cache.cc)."""
    try:
        with open(os.path.join(state_dir, "assignments.pb"), "rb") as f:
            content = f.read()
    except FileNotFoundError:
        return ""
    except OSError:
        return None
    header, _, payload = content.partition(b"\n")
    if not header.startswith(b"cs-agent-assignments "):
        return None
    r = subprocess.run([protoc, "--decode=cosched.v1.WatchAssignmentsResponse",
                        "-I", proto_dir, "-I", "/usr/include",
                        os.path.join(proto_dir, "cosched/v1/agent.proto")],
                       input=payload, capture_output=True)
    if r.returncode != 0:
        return None
    # Text format: assignments { vm_id: "..." ... trust_group: "..." ... }
    for block in re.findall(r"assignments \{(.*?)\n\}", r.stdout.decode(), re.S):
        if re.search(r'^\s*vm_id: "%s"$' % re.escape(vm), block, re.M):
            m = re.search(r'^\s*trust_group: "([^"]*)"$', block, re.M)
            return m.group(1) if m else ""
    return ""


def read_cookies(lab_cookies, pids):
    """{name: {"gone": bool, "threads": {tid: cookie}}} from one run of
    the lab's own reader (tests/lab/lab_cookies.cc)."""
    r = subprocess.run([lab_cookies] + [str(p) for p in pids.values()],
                       capture_output=True, text=True)
    by_pid = {str(p): n for n, p in pids.items()}
    out = {n: {"gone": False, "threads": {}} for n in pids}
    for line in r.stdout.splitlines():
        fields = line.split(" ", 3)
        if len(fields) < 3 or fields[0] not in by_pid:
            continue
        entry = out[by_pid[fields[0]]]
        if fields[1] == "0":
            entry["gone"] = True  # the whole process
        elif fields[2] != "error:ESRCH":  # a thread that exited meanwhile
            comm = fields[3] if len(fields) > 3 else ""
            entry["threads"][fields[1]] = [fields[2], comm]
    return out


def watch_main(argv):
    """Two samplers, each one JSON line per sample with the wall time "t"
    (ms): "ctl" every --interval-ms (csctl get VM, csd's and each agent's
    /metrics, each agent's state file, then whether each --pid runs) and,
    with --lab-cookies, "cookies" every --cookie-interval-ms (every thread
    of each --cookie-pid, read back with lab_cookies)."""
    p = argparse.ArgumentParser(prog="live_migration.py watch")
    p.add_argument("--out", required=True)
    p.add_argument("--stop", required=True)
    p.add_argument("--interval-ms", type=int, default=150)
    p.add_argument("--csctl", required=True)
    p.add_argument("--vm", required=True)
    p.add_argument("--csd-metrics", required=True)
    p.add_argument("--agent-metrics", action="append", help="HOST=URL")
    p.add_argument("--state", action="append", help="HOST=STATE_DIR")
    p.add_argument("--protoc", default="protoc")
    p.add_argument("--proto-dir")
    p.add_argument("--pid", action="append", help="NAME=PID")
    p.add_argument("--lab-cookies")
    p.add_argument("--cookie-pid", action="append", help="NAME=PID")
    p.add_argument("--cookie-interval-ms", type=int, default=100)
    a = p.parse_args(argv)
    agents = named(a.agent_metrics)
    states = named(a.state)
    pids = named(a.pid)
    lock = threading.Lock()
    out = open(a.out, "w")

    def emit(sample):
        with lock:
            out.write(json.dumps(sample) + "\n")
            out.flush()

    def stopped():
        return os.path.exists(a.stop)

    def ctl_loop():
        while not stopped():
            start = time.time()
            s = {"kind": "ctl", "t": round(start * 1000)}
            r = subprocess.run([a.csctl, "--timeout", "2", "get", a.vm, "-o", "json"],
                               capture_output=True, text=True)
            try:
                s["vm"] = json.loads(r.stdout) if r.returncode == 0 else None
            except ValueError:
                s["vm"] = None
            if s["vm"] is None:
                s["csctl_error"] = r.stderr.strip()[-300:]
            m = metrics(a.csd_metrics)
            s["revision"] = m.get("cosched_store_revision") if m else None
            s["writes"] = m.get('cosched_store_writes_total{code="OK"}') if m else None
            s["agents"] = {}
            for host, url in agents.items():
                am = metrics(url)
                s["agents"][host] = None if am is None else {
                    k[len('cosched_agent_vms{state="'):-2]: v for k, v in am.items()
                    if k.startswith('cosched_agent_vms{state="')}
            s["state"] = {h: state_assignment(d, a.vm, a.protoc, a.proto_dir)
                          for h, d in states.items()}
            s["alive"] = {n: alive(pid) for n, pid in pids.items()}
            emit(s)
            time.sleep(max(0, a.interval_ms / 1000 - (time.time() - start)))

    def cookie_loop():
        cpids = named(a.cookie_pid)
        while not stopped():
            start = time.time()
            s = {"kind": "cookies", "t": round(start * 1000)}
            s["procs"] = read_cookies(a.lab_cookies, cpids)
            emit(s)
            time.sleep(max(0, a.cookie_interval_ms / 1000 - (time.time() - start)))

    threads = [threading.Thread(target=ctl_loop)]
    if a.lab_cookies:
        threads.append(threading.Thread(target=cookie_loop))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


# --- the verdict -------------------------------------------------------------

def gaps(times):
    d = sorted(b - a for a, b in zip(times, times[1:]))
    if not d:
        return "no interval"
    return f"median {d[len(d) // 2]} ms, longest {d[-1]} ms"


class Violations:
    """Violations by kind: a failure seen in 60 samples is one line saying
    so, with its first occurrence."""

    def __init__(self):
        self.kinds = {}

    def append(self, message, kind=None):
        entry = self.kinds.setdefault(kind or message, [message, 0])
        entry[1] += 1

    def __bool__(self):
        return bool(self.kinds)

    def report(self):
        for message, count in self.kinds.values():
            print("FAIL:", message + (f" (and {count - 1} more samples like it)" if count > 1 else ""))


def check_main(argv):
    """Fails (exit 1, every violation listed) unless, over every sample:
    the VM's owner is never empty and changes exactly once, --from to --to;
    it is never in conflict nor reported fail-closed by csd; --to is among
    its hosts in every sample (the watch starts once both copies are
    reported) and --from in the first; each --state-while HOST=PIDNAME
    agent holds the VM's assignment (its trust group, as csd says) in its
    state file in every sample in which PIDNAME still runs; no agent counts
    a VM fail-closed in its /metrics; the store revision grows by at most
    --max-revisions over --revision-base; exactly one ChangeOwner audit
    record (--audit, `csctl audit --vm VM -o json`) moved it from --from to
    --to. With cookie samples: every thread of each --cookie-pid holds one
    and the same non-zero cookie in every sample until its process is gone,
    the same value throughout, and each --same-cookie A=B pair (a VM copy
    and a peer of its trust group on its host) holds equal cookies. The
    first sample of each kind must precede --event migrate=MS."""
    p = argparse.ArgumentParser(prog="live_migration.py check")
    p.add_argument("--samples", required=True)
    p.add_argument("--from", dest="source", required=True)
    p.add_argument("--to", dest="dest", required=True)
    p.add_argument("--revision-base", type=float, required=True)
    p.add_argument("--writes-base", type=float, required=True)
    p.add_argument("--max-revisions", type=int, required=True)
    p.add_argument("--max-writes", type=int, required=True)
    p.add_argument("--state-while", action="append", help="HOST=PIDNAME")
    p.add_argument("--audit", required=True)
    p.add_argument("--event", action="append", help="NAME=WALL_MS")
    p.add_argument("--same-cookie", action="append", help="NAME=NAME")
    p.add_argument("--min-ctl-samples", type=int, default=10)
    a = p.parse_args(argv)
    with open(a.samples) as f:
        samples = [json.loads(line) for line in f if line.strip()]
    ctl = [s for s in samples if s["kind"] == "ctl"]
    cookies = [s for s in samples if s["kind"] == "cookies"]
    events = {k: int(v) for k, v in named(a.event).items()}
    bad = Violations()
    # The watch must have seen the VM before the migration started.
    for kind, got in (("ctl", ctl), ("cookies", cookies)):
        if got and "migrate" in events and got[0]["t"] >= events["migrate"]:
            bad.append(f"the first {kind} sample is {got[0]['t'] - events['migrate']} ms after the migration started")
    t0 = ctl[0]["t"] if ctl else 0

    def at(s):
        return f"+{s['t'] - t0} ms"

    if len(ctl) < a.min_ctl_samples:
        bad.append(f"only {len(ctl)} csctl samples")
    owners = []
    group = ""
    for s in ctl:
        vm = s["vm"]
        if vm is None:
            bad.append(f"{at(s)}: csctl get failed: {s.get('csctl_error')}", "csctl")
            continue
        group = vm.get("trust_group") or group
        owner = vm.get("host_id", "")
        if not owner:
            bad.append(f"{at(s)}: the VM is on no host", "no host")
        elif not owners or owners[-1][0] != owner:
            owners.append((owner, s["t"]))
        if vm.get("conflict"):
            bad.append(f"{at(s)}: conflict: {vm['conflict']}", "conflict")
        state = (vm.get("enforcement") or {}).get("state")
        if state in (None, "fail-closed"):
            bad.append(f"{at(s)}: csd shows the owner's enforcement {state}", "enforcement")
        hosts = [x["host_id"] for x in vm.get("presence", [])]
        if a.dest not in hosts:
            bad.append(f"{at(s)}: {a.dest} not among the VM's hosts {hosts}", "presence")
        for host, counts in s["agents"].items():
            if counts is None:
                bad.append(f"{at(s)}: no /metrics from {host}'s agent", "metrics " + host)
            elif counts.get("fail-closed", 0) != 0:
                bad.append(f"{at(s)}: {host}'s agent counts {counts['fail-closed']:.0f} VM(s) fail-closed",
                           "fail-closed " + host)
    if ctl and ctl[0]["vm"] and a.source not in [x["host_id"] for x in ctl[0]["vm"].get("presence", [])]:
        bad.append(f"the first sample does not show the VM on {a.source}")
    seq = [o for o, _ in owners]
    if seq != [a.source, a.dest]:
        bad.append(f"owner went {' -> '.join(seq) or 'nowhere'}, not {a.source} -> {a.dest} once")
    for host, pidname in named(a.state_while).items():
        held = 0
        for s in ctl:
            if not s["alive"].get(pidname):
                continue
            g = s["state"].get(host)
            if g != group:
                bad.append(f"{at(s)}: {pidname} runs but {host}'s agent state holds "
                           f"{'no assignment' if g == '' else repr(g)} for the VM, not {group}",
                           "state " + host)
            else:
                held += 1
        ran = sum(1 for s in ctl if s["alive"].get(pidname))
        print(f"{host}: the VM's assignment ({group}) in its agent's state in {held} of the "
              f"{ran} samples while {pidname} ran")
        if ran < 5:
            bad.append(f"{pidname} ran in only {ran} samples")
    revisions = [s["revision"] for s in ctl if s["revision"] is not None]
    writes = [s["writes"] for s in ctl if s["writes"] is not None]
    if not revisions or not writes:
        bad.append("no store revision or writes from csd's /metrics")
    else:
        dr, dw = revisions[-1] - a.revision_base, writes[-1] - a.writes_base
        print(f"store: revision {a.revision_base:.0f} -> {revisions[-1]:.0f} (+{dr:.0f}, "
              f"bound {a.max_revisions}), writes +{dw:.0f} (bound {a.max_writes})")
        if dr > a.max_revisions:
            bad.append(f"{dr:.0f} revisions written, over the bound of {a.max_revisions}")
        if dw > a.max_writes:
            bad.append(f"{dw:.0f} store writes, over the bound of {a.max_writes}")
    with open(a.audit) as f:
        audit = json.load(f)
    moves = [r for r in audit if r.get("method") == "ChangeOwner"]
    if len(moves) != 1:
        bad.append(f"{len(moves)} ChangeOwner audit records, not 1")
    for r in moves:
        before = (r.get("before") or {}).get("host_id")
        after = (r.get("after") or {}).get("host_id")
        print(f"audit: ChangeOwner by {r.get('who')} ({r.get('role')}): {before} -> {after}")
        if (before, after) != (a.source, a.dest):
            bad.append(f"ChangeOwner moved it {before} -> {after}, not {a.source} -> {a.dest}")

    print(f"csctl samples: {len(ctl)} over {(ctl[-1]['t'] - t0) / 1000 if ctl else 0:.1f} s "
          f"({gaps([s['t'] for s in ctl])})")
    for owner, t in owners:
        rel = ", ".join(f"{t - v:+d} ms after {k}" for k, v in events.items())
        print(f"owner {owner} from {at({'t': t})} ({rel})")
    both = [s for s in ctl if s["vm"] and
            {a.source, a.dest} <= {x["host_id"] for x in s["vm"].get("presence", [])}]
    if both:
        print(f"on both hosts (csd's presence): {len(both)} samples, "
              f"{(both[-1]['t'] - both[0]['t']) / 1000:.1f} s")

    if cookies:
        first = {}
        values = {}
        checked = {}
        for s in cookies:
            for name, proc in s["procs"].items():
                threads = proc["threads"]
                if proc["gone"] or not threads:
                    continue
                seen = {c for c, _ in threads.values()}
                if name not in first:
                    if len(seen) == 1 and "0" not in seen and not any(c.startswith("error") for c in seen):
                        first[name] = s["t"]
                        values[name] = seen.pop()
                    else:
                        bad.append(f"{at(s)}: {name} is not tagged when the watch starts: {threads}")
                        first[name] = s["t"]
                        values[name] = None
                    continue
                checked[name] = checked.get(name, 0) + 1
                wrong = {tid: c for tid, c in threads.items() if c[0] != values[name]}
                if wrong:
                    bad.append(f"{at(s)}: {name} threads off its cookie {values[name]}: {wrong}",
                               "cookie " + name)
            for x, y in named(a.same_cookie).items():
                px, py = s["procs"].get(x), s["procs"].get(y)
                if not px or not py or px["gone"] or py["gone"] or not px["threads"] or not py["threads"]:
                    continue
                cx = {c for c, _ in px["threads"].values()}
                cy = {c for c, _ in py["threads"].values()}
                if cx != cy:
                    bad.append(f"{at(s)}: {x} holds {sorted(cx)}, its group's peer {y} {sorted(cy)}",
                               "peer " + x)
        for name in first:
            n = checked.get(name, 0)
            print(f"cookies: {name} on {values[name]} in all of {n + 1} samples "
                  f"({gaps([s['t'] for s in cookies])})")
            if n < 5:
                bad.append(f"{name}: only {n + 1} cookie samples")
    bad.report()
    return 1 if bad else 0


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, argv = sys.argv[1], sys.argv[2:]
    if cmd == "qmp":
        return qmp_main(argv) or 0
    if cmd == "migrate":
        return migrate_main(argv)
    if cmd == "watch":
        return watch_main(argv)
    if cmd == "check":
        return check_main(argv)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
