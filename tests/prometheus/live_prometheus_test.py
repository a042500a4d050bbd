#!/usr/bin/python3
"""The shipped rules and dashboard in a real Prometheus, against a real csd
and a real cs-agent (issue #38, items 4 and 5).

Starts, on free loopback ports and in a temporary folder: csd (SQLite,
plaintext agents allowed), one cs-agent (procfs discovery), and Debian's
prometheus scraping both every second with deploy/prometheus's rules
evaluated every second. Then:

- every rule group loads and every rule evaluates without an error;
- every query of deploy/grafana/cosched.json (panels and variables, with
  Grafana's variables replaced by values that match anything) runs without
  an error (that each cosched_* name is one the daemons register is
  dashboard_test's, in C++);
- after cs-agent is SIGKILLed, CoschedAgentDown goes pending for its
  instance (its `for:` is 2 minutes: pending is what a test can wait for),
  and after cs-agent is started again it is gone.

Usage: live_prometheus_test.py SOURCE_DIR BUILD_DIR [PROMETHEUS]
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


class QueryError(AssertionError):
    pass


def wait_for(what, condition, timeout=60.0):
    """Polls condition() until it returns something true; fails naming what."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
            if last:
                return last
        except (OSError, ValueError) as e:  # not up yet
            last = e
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


class Run:
    """The processes of one test, killed at the end whatever happens."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = {}

    def start(self, name, argv):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w", encoding="utf-8")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        return self.procs[name]

    def kill(self, name):
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def log_tail(self, name, lines=20):
        try:
            with open(os.path.join(self.tmp, f"{name}.log"), encoding="utf-8") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def close(self):
        for proc in self.procs.values():
            proc.kill()
            proc.wait()


def dashboard_queries(path):
    """Every PromQL query of a Grafana dashboard: panels' exprs and query
    variables' label_values(...) selectors."""
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    queries = []

    def walk(node, title):
        if isinstance(node, dict):
            title = node.get("title", title)
            if isinstance(node.get("expr"), str):
                queries.append((title, node["expr"]))
            for value in node.values():
                walk(value, title)
        elif isinstance(node, list):
            for value in node:
                walk(value, title)

    walk(dashboard.get("panels", []), "")
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") == "query" and isinstance(query, str):
            # label_values(<selector>, label): the selector is the query.
            inner = query[len("label_values("):query.rindex(",")]
            queries.append((f"variable {var.get('name')}", inner))
    return queries


def grafana_to_promql(expr):
    """Grafana's variables as values Prometheus takes: regex matchers that
    match anything, and a rate window."""
    for var, value in (("$__rate_interval", "1m"), ("$__interval", "15s"),
                       ("${instance}", ".*"), ("$instance", ".*"),
                       ("${vm}", ".*"), ("$vm", ".*")):
        expr = expr.replace(var, value)
    if "$" in expr:
        raise AssertionError(f"a Grafana variable this test does not know: {expr}")
    return expr


def main():
    source, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    prometheus = sys.argv[3] if len(sys.argv) > 3 else "/usr/bin/prometheus"
    csd_bin = os.path.join(build, "server", "csd")
    agent_bin = os.path.join(build, "agent", "cs-agent")
    rules = os.path.join(source, "deploy", "prometheus", "cosched-rules.yml")
    dashboard = os.path.join(source, "deploy", "grafana", "cosched.json")
    for path in (prometheus, csd_bin, agent_bin):
        if not os.access(path, os.X_OK):
            print(f"FAIL: {path} is missing (scripts/install-deps.sh installs Debian's "
                  "prometheus; the others are built)")
            return 1

    tmp = tempfile.mkdtemp(prefix="cosched-prometheus-")
    run = Run(tmp)
    try:
        csd_port, csd_metrics, agent_metrics, prom_port = (free_port() for _ in range(4))
        csd_config = os.path.join(tmp, "csd.yaml")
        with open(csd_config, "w", encoding="utf-8") as f:
            f.write(f"listen: 127.0.0.1:{csd_port}\n"
                    f"data_dir: {tmp}/csd\n"
                    f"metrics_listen: 127.0.0.1:{csd_metrics}\n"
                    "plaintext_agents: true\n"
                    "local_socket:\n  path: \"off\"\n"
                    f"audit:\n  file: {tmp}/audit.jsonl\n")
        run.start("csd", [csd_bin, "--config", csd_config])
        agent_argv = [agent_bin, "--server", f"127.0.0.1:{csd_port}", "--host-id", "prom-h1",
                      "--state-dir", os.path.join(tmp, "agent"), "--discovery", "procfs",
                      "--metrics-listen", f"127.0.0.1:{agent_metrics}"]
        run.start("agent", agent_argv)

        prom_config = os.path.join(tmp, "prometheus.yml")
        with open(prom_config, "w", encoding="utf-8") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    f"rule_files:\n  - {rules}\n"
                    "scrape_configs:\n"
                    f"  - job_name: csd\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{csd_metrics}']\n"
                    f"  - job_name: cs-agent\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{agent_metrics}']\n")
        run.start("prometheus", [prometheus, f"--config.file={prom_config}",
                                 f"--storage.tsdb.path={tmp}/tsdb",
                                 f"--web.listen-address=127.0.0.1:{prom_port}"])
        api = f"http://127.0.0.1:{prom_port}/api/v1"

        def query(expr):
            url = f"{api}/query?" + urllib.parse.urlencode({"query": expr})
            try:
                answer = get_json(url)
            except urllib.error.HTTPError as e:  # Prometheus' 400 with its reason
                raise QueryError(f"query failed: {expr}: {e.read().decode(errors='replace')}")
            if answer.get("status") != "success":
                raise QueryError(f"query failed: {expr}: {answer}")
            return answer["data"]["result"]

        def up(job):
            return [r for r in query(f'up{{job="{job}"}}') if r["value"][1] == "1"]

        wait_for("Prometheus to scrape csd and cs-agent", lambda: up("csd") and up("cs-agent"))
        agent_instance = f"127.0.0.1:{agent_metrics}"
        # The agent registered with csd: csd counts it.
        wait_for("csd to count the agent as connected",
                 lambda: query("sum(cosched_csd_connected_agents) > 0"))

        # Every rule group loaded and every rule evaluated, without error.
        def evaluated():
            groups = get_json(f"{api}/rules")["data"]["groups"]
            names = {g["name"] for g in groups}
            rules_ = [r for g in groups for r in g["rules"]]
            waiting = [r["name"] for r in rules_
                       if r.get("lastEvaluation", "0001").startswith("0001")]
            if not rules_ or waiting:
                return None
            return names, rules_
        names, loaded = wait_for("every rule to be evaluated once", evaluated)
        failures = [f"{r['name']}: {r['lastError']}" for r in loaded
                    if r.get("health") != "ok" or r.get("lastError")]
        if failures:
            raise AssertionError("rules that fail to evaluate:\n  " + "\n  ".join(failures))
        print(f"ok: {len(loaded)} rules in {len(names)} groups evaluate")

        queries = dashboard_queries(dashboard)
        if len(queries) < 10:
            raise AssertionError(f"only {len(queries)} queries found in {dashboard}")
        for title, expr in queries:
            try:
                query(grafana_to_promql(expr))
            except AssertionError as e:
                raise AssertionError(f"dashboard panel '{title}': {e}") from None
        print(f"ok: {len(queries)} dashboard queries run")

        def agent_down_alert():
            alerts = get_json(f"{api}/alerts")["data"]["alerts"]
            return [a for a in alerts if a["labels"].get("alertname") == "CoschedAgentDown"
                    and a["labels"].get("instance") == agent_instance]

        if agent_down_alert():
            raise AssertionError(f"CoschedAgentDown before the agent died: {agent_down_alert()}")
        run.kill("agent")
        pending = wait_for("CoschedAgentDown to go pending after the agent's SIGKILL",
                           agent_down_alert, timeout=30)
        if pending[0]["state"] not in ("pending", "firing"):
            raise AssertionError(f"CoschedAgentDown is {pending[0]['state']}")
        print(f"ok: CoschedAgentDown {pending[0]['state']} for {agent_instance}")
        run.start("agent", agent_argv)
        wait_for("CoschedAgentDown to clear once the agent is back",
                 lambda: not agent_down_alert(), timeout=30)
        print("ok: CoschedAgentDown cleared after the agent's restart")
        return 0
    except AssertionError as e:
        print(f"FAIL: {e}")
        for name in ("csd", "agent", "prometheus"):
            print(f"--- {name} log (last lines):\n{run.log_tail(name)}")
        return 1
    finally:
        run.close()


if __name__ == "__main__":
    sys.exit(main())
