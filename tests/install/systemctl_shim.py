#!/usr/bin/python3
"""systemctl for install_guide_test.py's machines, which have no systemd.

Each machine of the install guide's test is an overlay of the build
machine's root in a mount namespace of its own (a chroot), where the real
systemctl only prints "Running in chroot, ignoring request". This one runs
the unit the packages installed as systemd would, in what matters for the
guide: its Environment= and EnvironmentFile= (with %p, and drop-ins of
/etc/systemd/system/UNIT.d/*.conf after the unit), User= and Group=,
the directories systemd makes for it (RuntimeDirectory=, StateDirectory=,
LogsDirectory=, with their modes), ExecStart= with $VAR expansion, and
ExecReload= with $MAINPID. The sandboxing directives (ProtectSystem= and
the like) are not applied: lab.systemd_units checks those under a real
systemd.

Commands: start, restart, stop, reload, is-active, status, enable,
disable, daemon-reload. A started unit runs in the background, its output
in /var/log/shim/UNIT.log, its pid in /run/shim/UNIT.pid.
"""
import glob
import grp
import os
import pwd
import re
import shlex
import signal
import subprocess
import sys
import time

UNIT_DIRS = ["/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"]


def unit_name(name):
    return name if "." in name else name + ".service"


def read_unit(name):
    for d in UNIT_DIRS:
        path = os.path.join(d, name)
        if os.path.exists(path):
            break
    else:
        sys.exit(f"systemctl (shim): Unit {name} not found.")
    service = {}
    drop_ins = os.path.join("/etc/systemd/system", name + ".d")
    conf = sorted(glob.glob(os.path.join(drop_ins, "*.conf")))
    for file in [path] + conf:
        section = None
        with open(file) as f:
            for raw in f:
                line = raw.strip()
                if not line or line.startswith(("#", ";")):
                    continue
                if line.startswith("["):
                    section = line.strip("[]")
                    continue
                if section != "Service" or "=" not in line:
                    continue
                key, value = line.split("=", 1)
                service.setdefault(key.strip(), []).append(value.strip())
    return service


def expand(value, env):
    def sub(m):
        return env.get(m.group(1) or m.group(2), "")
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, value)


def environment(name, service):
    prefix = name.rsplit(".", 1)[0]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    for assignment in service.get("Environment", []):
        for word in shlex.split(assignment):
            key, _, value = word.partition("=")
            env[key] = value.replace("%p", prefix).replace("%H", os.uname().nodename)
    for spec in service.get("EnvironmentFile", []):
        optional = spec.startswith("-")
        path = spec.lstrip("-").replace("%p", prefix)
        if not os.path.exists(path):
            if optional:
                continue
            sys.exit(f"systemctl (shim): {name}: EnvironmentFile {path} is missing")
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#") or "=" not in line:
                    continue
                key, value = line.split("=", 1)
                env[key.strip()] = value.strip().strip('"')
    return env


def ids(service):
    user = service.get("User", ["root"])[-1]
    pw = pwd.getpwnam(user)
    group = service.get("Group", [None])[-1]
    gid = grp.getgrnam(group).gr_gid if group else pw.pw_gid
    return pw, gid


def make_directories(service, uid, gid):
    for key, base in (("RuntimeDirectory", "/run"), ("StateDirectory", "/var/lib"),
                      ("LogsDirectory", "/var/log"), ("ConfigurationDirectory", "/etc")):
        mode = int(service.get(key + "Mode", ["0755"])[-1], 8)
        for names in service.get(key, []):
            for d in names.split():
                path = os.path.join(base, d)
                os.makedirs(path, exist_ok=True)
                if key != "ConfigurationDirectory":
                    os.chown(path, uid, gid)
                    os.chmod(path, mode)


def pid_file(name):
    return f"/run/shim/{name}.pid"


def main_pid(name):
    try:
        with open(pid_file(name)) as f:
            pid = int(f.read())
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(") ", 1)[1].startswith("Z"):
                return None
        return pid
    except (OSError, ValueError):
        return None


def start(name):
    if main_pid(name):
        return 0
    service = read_unit(name)
    env = environment(name, service)
    pw, gid = ids(service)
    make_directories(service, pw.pw_uid, gid)
    command = shlex.split(expand(service["ExecStart"][-1].lstrip("-@+!"), env))
    os.makedirs("/run/shim", exist_ok=True)
    os.makedirs("/var/log/shim", exist_ok=True)
    log = open(f"/var/log/shim/{name}.log", "ab")
    umask = int(service.get("UMask", ["0022"])[-1], 8)

    def become():
        os.setsid()
        os.umask(umask)
        os.initgroups(pw.pw_name, gid)
        os.setgid(gid)
        os.setuid(pw.pw_uid)

    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                               stderr=subprocess.STDOUT, preexec_fn=become, cwd="/")
    with open(pid_file(name), "w") as f:
        f.write(str(process.pid))
    # As Type=simple: started once it runs; one that exits at once failed.
    time.sleep(1)
    if process.poll() is not None:
        print(f"systemctl (shim): {name} exited at start with status {process.returncode}; "
              f"its log:\n" + tail(name), file=sys.stderr)
        return 1
    return 0


def stop(name):
    pid = main_pid(name)
    if not pid:
        return 0
    os.kill(pid, signal.SIGTERM)
    for _ in range(300):
        if not main_pid(name):
            return 0
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return 0


def reload(name):
    pid = main_pid(name)
    if not pid:
        print(f"systemctl (shim): {name} is not active, cannot reload.", file=sys.stderr)
        return 1
    service = read_unit(name)
    command = expand(service["ExecReload"][-1], {"MAINPID": str(pid)})
    return subprocess.call(shlex.split(command))


def tail(name):
    try:
        with open(f"/var/log/shim/{name}.log", errors="replace") as f:
            return "".join(f.readlines()[-20:])
    except OSError:
        return "(no log)"


def main(argv):
    args = [a for a in argv if not a.startswith("-")]
    if not args:
        sys.exit("systemctl (shim): no command")
    command, units = args[0], [unit_name(u) for u in args[1:]]
    if command in ("daemon-reload", "enable", "disable", "mask", "unmask"):
        if command == "enable" and "--now" in argv:
            return max([start(u) for u in units] or [0])
        return 0
    if command == "start":
        return max(start(u) for u in units)
    if command == "restart":
        for u in units:
            stop(u)
        return max(start(u) for u in units)
    if command == "stop":
        return max(stop(u) for u in units)
    if command in ("reload", "try-restart", "reload-or-restart"):
        return max(reload(u) if command != "try-restart" else 0 for u in units)
    if command == "is-active":
        active = all(main_pid(u) for u in units)
        if "-q" not in argv and "--quiet" not in argv:
            print("active" if active else "inactive")
        return 0 if active else 3
    if command == "status":
        for u in units:
            pid = main_pid(u)
            print(f"{u}: {'active (running), pid ' + str(pid) if pid else 'inactive'}")
            print(tail(u))
        return 0 if all(main_pid(u) for u in units) else 3
    sys.exit(f"systemctl (shim): '{command}' is not something the install guide's test runs")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
