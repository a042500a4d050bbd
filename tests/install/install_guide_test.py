#!/usr/bin/python3
"""Follows docs/install.md word for word, and checks that the fleet works.

Each machine of the guide (the admin's with the CA, three etcd members,
three csd control nodes, a hypervisor) is an overlay of this machine's
root in a mount namespace of its own, chrooted into, on a loopback address
of its own (127.0.0.0/8 is all loopback): what a step writes under /etc or
/var stays on its machine, and the packages are installed there with apt,
as the guide says. The marked blocks of the guide (```sh install=ROLE)
run in order, each as one `sh -e` on every machine of its role, with the
files its `copy=` names copied from the CA machine as an operator would.
Only the guide's fleet.sh values are the test's (addresses and free ports),
and systemctl is tests/install/systemctl_shim.py (no systemd in a chroot).

Three etcd members, as the guide has. One setting is the test's, not the
guide's: etcd checks a peer's certificate against the address the peer
connects from, and on one loopback every connection leaves from 127.0.0.1
whatever address its member listens on (in a real network each member
dials from its own), so each member gets a drop-in that skips that check
(--experimental-peer-skip-client-san-verification; the CA check stays).

Then the result: `csctl status` healthy with three replicas and a leader,
etcd's authentication on with csd's user confined to its prefix, the agent
registered over mutual TLS, and a tag delivered to it: its applied revision
reaches the tag's. A step that fails names itself and shows its output.

Needs root, the packages of build-deb/ (scripts/package.sh) and the
Debian packages scripts/install-deps.sh installs.
"""
import argparse
import glob
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROLE_NODES = {}  # filled by main: role -> [node names]


class StepFailed(Exception):
    pass


def parse_guide(path):
    """The marked blocks, in order: (step, role, copies, text)."""
    blocks = []
    heading = "(top)"
    lines = open(path).read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        m = re.match(r"^```sh\s+install=(\S+)(?:\s+copy=(\S+))?\s*$", line)
        if m:
            body = []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            role, copies = m.group(1), (m.group(2) or "")
            n = sum(1 for b in blocks if b[0].startswith(heading)) + 1
            blocks.append((f"{heading} (block {n}, on {role})", role,
                           [c for c in copies.split(",") if c], "\n".join(body) + "\n"))
        i += 1
    return blocks


def free_port(addresses):
    """A port free on every address."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            for a in addresses:
                with socket.socket() as s:
                    s.bind((a, port))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port")


class Machine:
    """An overlay of / in a mount namespace of its own, chrooted into."""

    def __init__(self, name, address, workdir):
        self.name, self.address = name, address
        self.dir = os.path.join(workdir, name)
        for d in ("upper", "work", "merged"):
            os.makedirs(os.path.join(self.dir, d))
        m = os.path.join(self.dir, "merged")
        setup = " && ".join([
            f"mount -t overlay overlay -o lowerdir=/,upperdir={self.dir}/upper,workdir={self.dir}/work {m}",
            f"mount --rbind /proc {m}/proc", f"mount --rbind /sys {m}/sys",
            f"mount --rbind /dev {m}/dev",
            f"mount -t tmpfs -o mode=0755 tmpfs {m}/run",
            f"mount -t tmpfs -o mode=1777 tmpfs {m}/tmp",
            f"exec chroot {m} sleep infinity",
        ])
        self.holder = subprocess.Popen(["unshare", "--mount", "--propagation", "private",
                                        "sh", "-ec", setup])
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if os.readlink(f"/proc/{self.holder.pid}/root") == "/":
                    time.sleep(0.05)
                    continue
            except OSError:
                pass
            # The holder has exec'd sleep in the chroot once its root moved.
            if os.path.exists(f"/proc/{self.holder.pid}/root/run") and \
                    os.readlink(f"/proc/{self.holder.pid}/exe").endswith("sleep"):
                break
            time.sleep(0.05)
        else:
            raise RuntimeError(f"machine {name}: the overlay did not come up")

    def run(self, script, env=None, stdin=None, check=True, timeout=600):
        variables = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                     "HOME": "/root", "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
        variables.update(env or {})
        command = ["nsenter", "-t", str(self.holder.pid), "-m", "-r", "-w", "--",
                   "/usr/bin/env", "-i"] + [f"{k}={v}" for k, v in variables.items()] + \
                  ["/bin/sh", "-ec", "cd /root\n" + script]
        result = subprocess.run(command, input=stdin, capture_output=True, timeout=timeout)
        if check and result.returncode != 0:
            raise StepFailed(f"on {self.name}: exit {result.returncode}\n--- stdout ---\n"
                             f"{result.stdout.decode(errors='replace')}\n--- stderr ---\n"
                             f"{result.stderr.decode(errors='replace')}")
        return result

    def put(self, path, data, mode=0o644):
        self.run(f"mkdir -p {shlex.quote(os.path.dirname(path))}; cat >{shlex.quote(path)}; "
                 f"chmod {mode:o} {shlex.quote(path)}", stdin=data)

    def get(self, path):
        return self.run(f"cat {shlex.quote(path)}").stdout

    def processes(self):
        """Pids of the processes in this machine's mount namespace."""
        try:
            ns = os.readlink(f"/proc/{self.holder.pid}/ns/mnt")
        except OSError:
            return []
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.readlink(f"/proc/{entry}/ns/mnt") == ns:
                        pids.append(int(entry))
                except OSError:
                    pass
        return pids

    def logs(self):
        return self.run("for f in /var/log/shim/*.log; do [ -f \"$f\" ] || continue; "
                        "echo \"--- $f\"; tail -n 30 \"$f\"; done", check=False).stdout.decode(
                            errors="replace")

    def destroy(self):
        for pid in self.processes():
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        self.holder.wait(timeout=10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--guide", required=True)
    parser.add_argument("--debs", required=True, help="build-deb/ of scripts/package.sh")
    parser.add_argument("--shim", required=True, help="systemctl_shim.py")
    parser.add_argument("--keep", action="store_true", help="keep the machines' files")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("install_guide_test: needs root (mount namespaces, apt in the overlays)")
    debs = sorted(d for d in glob.glob(os.path.join(args.debs, "*.deb")) if "dbgsym" not in d)
    if not any("cosched-server_" in d for d in debs):
        sys.exit(f"install_guide_test: no cosched packages in {args.debs}: run scripts/package.sh")
    blocks = parse_guide(args.guide)
    if not blocks or blocks[0][1] != "fleet":
        sys.exit("install_guide_test: the guide's first marked block must be install=fleet")
    fleet_block = blocks[0][3]

    # The fleet: every machine on a loopback address of its own.
    fleet = {
        "admin": "127.0.0.10",
        "etcd-1": "127.0.0.11", "etcd-2": "127.0.0.12", "etcd-3": "127.0.0.13",
        "csd-a": "127.0.0.21", "csd-b": "127.0.0.22", "csd-c": "127.0.0.23",
        "compute-001": "127.0.0.31",
    }
    etcds, csds, hypervisors = ["etcd-1", "etcd-2", "etcd-3"], ["csd-a", "csd-b", "csd-c"], ["compute-001"]
    ports = {}
    for name in ("ETCD_CLIENT_PORT", "ETCD_PEER_PORT", "CSD_PORT", "CSD_METRICS_PORT",
                 "AGENT_METRICS_PORT"):
        ports[name] = free_port(list(fleet.values()))
    nodes = lambda names: " ".join(f"{n}={fleet[n]}" for n in names)
    overrides = "\n".join(
        [f'ETCD_NODES="{nodes(etcds)}"', f'CSD_NODES="{nodes(csds)}"',
         f'HYPERVISORS="{nodes(hypervisors)}"'] + [f"{k}={v}" for k, v in ports.items()])
    fleet_sh = (fleet_block + "\n# install_guide_test.py: this test's machines\n" +
                overrides + "\n").encode()
    roles = {"ca": ["admin"], "etcd-admin": ["admin"], "etcd-member": etcds,
             "control": csds, "control-check": ["csd-a"], "hypervisor": hypervisors}

    workdir = tempfile.mkdtemp(prefix="cosched-install-", dir="/var/tmp")
    machines = {}
    failed = None
    try:
        shim = open(args.shim, "rb").read()
        for name, address in fleet.items():
            m = Machine(name, address, workdir)
            machines[name] = m
            m.put("/usr/local/sbin/systemctl", shim, 0o755)
            m.put("/root/fleet.sh", fleet_sh)
            for deb in debs:
                m.put(os.path.join("/root", os.path.basename(deb)), open(deb, "rb").read())
            if name in etcds:
                # The test's one setting (above): peers all dial from 127.0.0.1.
                m.put("/etc/systemd/system/etcd.service.d/install-guide-test.conf",
                      b"[Service]\nEnvironment=ETCD_EXPERIMENTAL_PEER_SKIP_CLIENT_SAN_VERIFICATION=true\n")
        print(f"install_guide_test: {len(machines)} machines under {workdir}; ports {ports}")

        for step, role, copies, text in blocks[1:]:
            if role not in roles:
                raise StepFailed(f"{step}: unknown role '{role}' (the test knows {sorted(roles)})")
            for name in roles[role]:
                m = machines[name]
                for c in copies:
                    path = c.replace("$NODE", name)
                    m.put(f"/root/pki/{path}", machines["admin"].get(f"/root/pki/{path}"), 0o600)
                started = time.time()
                deadline = started + (120 if role.endswith("-check") else 0)
                while True:
                    try:
                        result = m.run(text, env={"NODE": name})
                        break
                    except StepFailed as e:
                        if time.time() >= deadline:
                            raise StepFailed(f"{step}, {e}")
                        time.sleep(2)
                print(f"install_guide_test: done in {time.time() - started:.1f} s: {step} on {name}")
                out = result.stdout.decode(errors="replace").strip()
                if out:
                    print("  " + out.replace("\n", "\n  "))

        check_fleet(machines, fleet, etcds, csds, hypervisors, ports)
        print("install_guide_test: the guide works as written")
    except StepFailed as e:
        failed = str(e)
    finally:
        if failed:
            print(f"install_guide_test: FAILED at step {failed}")
            for name, m in machines.items():
                logs = m.logs()
                if logs.strip():
                    print(f"=== {name}'s daemons ===\n{logs}")
        for m in machines.values():
            m.destroy()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def wait_for(what, probe, timeout=90):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        ok, last = probe()
        if ok:
            return last
        time.sleep(1)
    raise StepFailed(f"after the guide: {what} within {timeout} s; last: {last}")


def check_fleet(machines, fleet, etcds, csds, hypervisors, ports):
    admin = machines["admin"]

    def csctl(*words):
        r = admin.run("csctl " + " ".join(shlex.quote(w) for w in words), check=False)
        return r.returncode, r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")

    # csctl status: three replicas, each healthy, one leader.
    def healthy():
        code, out = csctl("status", "-o", "json")
        if code != 0:
            return False, out
        replicas = json.loads(out).get("replicas", [])
        leaders = [r for r in replicas if r.get("leader")]
        return len(replicas) == 3 and len(leaders) == 1, out
    status = wait_for("csctl status healthy with 3 replicas and one leader", healthy)
    print("install_guide_test: csctl status:\n  " + status.strip().replace("\n", "\n  "))

    # etcd: one cluster of every member, one leader.
    etcd = ",".join(f"https://{fleet[e]}:{ports['ETCD_CLIENT_PORT']}" for e in etcds)
    base = f"ETCDCTL_API=3 etcdctl --endpoints={etcd} --cacert=pki/ca.crt"
    as_root = f"{base} --cert=pki/etcd/root.crt --key=pki/etcd/root.key"
    r = admin.run(f"{as_root} endpoint status -w json", check=False)
    if r.returncode != 0:
        raise StepFailed(f"after the guide: etcd endpoint status failed: {r.stderr!r}")
    statuses = json.loads(r.stdout)
    clusters = {s["Status"]["header"]["cluster_id"] for s in statuses}
    leaders = {s["Status"]["leader"] for s in statuses}
    if len(statuses) != len(etcds) or len(clusters) != 1 or len(leaders) != 1:
        raise StepFailed(f"after the guide: want {len(etcds)} etcd members of one cluster with "
                         f"one leader, got {r.stdout.decode(errors='replace')}")
    print(f"install_guide_test: etcd: {len(statuses)} members of one cluster, one leader")

    # etcd: authentication on, csd's user confined to its prefix.
    as_csd = f"{base} --cert=pki/etcd/cosched-csd.crt --key=pki/etcd/cosched-csd.key"
    r = admin.run(f"{as_csd} put /not-cosched x", check=False)
    if r.returncode == 0 or b"permission denied" not in r.stderr:
        raise StepFailed(f"after the guide: csd's etcd user wrote outside its prefix: {r.stderr!r}")
    r = admin.run(f"{as_csd} get /cosched/ --prefix --keys-only", check=False)
    if r.returncode != 0 or not r.stdout.strip():
        raise StepFailed(f"after the guide: csd's etcd user cannot read its prefix: {r.stderr!r}")
    r = admin.run(f"{base} --cert=pki/user/ops-admin.crt --key=pki/user/ops-admin.key get /cosched/ --prefix",
                  check=False)
    if r.returncode == 0:
        raise StepFailed("after the guide: etcd answers a certificate that is no etcd user")
    print("install_guide_test: etcd: authentication on; csd's user is refused outside /cosched/")

    # The agent: registered over mutual TLS, connected.
    host = hypervisors[0]
    def registered():
        code, out = csctl("hosts", "get", host, "-o", "json")
        return code == 0 and '"connected": true' in out, out
    wait_for(f"host {host} registered and connected", registered)
    agent_metrics = f"http://{fleet[host]}:{ports['AGENT_METRICS_PORT']}/metrics"
    csd_metrics = f"http://{fleet[csds[0]]}:{ports['CSD_METRICS_PORT']}/metrics"
    series_before = series(agent_metrics), series(csd_metrics)

    # A tag delivered: a VM on the hypervisor (a QEMU that runs no guest),
    # tagged through csctl; the agent's applied revision reaches the tag's.
    hv = machines[host]
    hv.run("setsid qemu-system-x86_64 -name guest=guide-vm,debug-threads=on -machine none -S "
           "-nodefaults -display none -daemonize -pidfile /run/guide-vm.pid")
    def reported():
        code, out = csctl("hosts", "get", host, "-o", "json")
        return code == 0 and '"vm_count": 1' in out, out
    wait_for("the agent reports the VM", reported)
    code, out = csctl("tag", "guide-vm", "--tenant", "acme", "-o", "json")
    if code != 0:
        raise StepFailed(f"after the guide: csctl tag guide-vm: {out}")
    revision = json.loads(out)["revision"]
    def delivered():
        code, out = csctl("hosts", "get", host, "-o", "json")
        if code != 0:
            return False, out
        applied = json.loads(out).get("applied_revision", 0)
        return applied >= revision, f"applied {applied}, tag at {revision}"
    wait_for("the tag delivered to the agent", delivered)
    print(f"install_guide_test: agent {host} registered over mTLS; tag at revision {revision} delivered")
    # Sizing figures for docs/install.md: the series a scrape returns.
    series_after = series(agent_metrics), series(csd_metrics)
    print(f"install_guide_test: Prometheus series: cs-agent {series_before[0]} with no VM, "
          f"{series_after[0]} with one tagged VM; csd (leader) {series_before[1]} with the "
          f"host and no VM, {series_after[1]} with one tagged VM")


def series(url):
    """The series one scrape of `url` returns."""
    with urllib.request.urlopen(url, timeout=10) as r:
        return sum(1 for line in r.read().decode().split("\n") if line and not line.startswith("#"))


if __name__ == "__main__":
    sys.exit(main())
