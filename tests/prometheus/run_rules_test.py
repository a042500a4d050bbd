#!/usr/bin/python3
"""The shipped Prometheus rules parse, fire when they should and not before,
and point to their runbooks.

- `promtool check rules` on every deploy/prometheus/*.yml, and
  `promtool test rules` on tests/prometheus/*_test.yml; a file that does
  not parse, or a test that fails, fails with promtool's own message.
- Every alert has a severity (critical or warning), a summary, a
  description and a runbook_url to docs/alerts.md#<its name in lower
  case>, a heading of that page; every alert heading there is an alert.
- Every alert has a test where it fires and one where it does not
  (exp_alerts: []).
- Every cosched_* metric the rules read is one docs/metrics.md documents
  (which metrics_test checks against the code).

Usage: run_rules_test.py [SOURCE_DIR] [PROMTOOL]
       (defaults: two levels up; $PROMTOOL, else /usr/bin/promtool)
"""
import glob
import os
import re
import subprocess
import sys

RUNBOOK_BASE = "https://github.com/cosched/cosched/blob/main/docs/alerts.md#"
SEVERITIES = ("critical", "warning")
# A metric name, not the middle of a recording rule's level:name:operation.
METRIC = re.compile(r"(?<![\w:])(cosched_[a-z0-9_]+)(?![\w:])")


def promtool(tool, args):
    """Runs promtool; returns its output when it fails, else None."""
    try:
        r = subprocess.run([tool] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, check=False)
    except OSError as e:
        return f"cannot run {tool}: {e} (scripts/install-deps.sh installs Debian's prometheus)"
    return r.stdout if r.returncode != 0 else None


def alerts_in(path):
    """{alert name: (its rule's lines, first line number)} of a rules file."""
    alerts = {}
    current = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"\s*- (alert|record|name): *(\S+)", line)
            if m:
                current = None
                if m.group(1) == "alert":
                    current = m.group(2)
                    alerts[current] = ([], n)
                continue
            if current:
                alerts[current][0].append(line)
    return alerts


def check_alert(name, lines, runbook_anchors):
    text = "".join(lines)
    errors = []
    severity = re.search(r"^\s+severity: *(\S+)", text, re.M)
    if not severity or severity.group(1) not in SEVERITIES:
        errors.append("needs a severity label, critical or warning")
    for key in ("summary", "description"):
        if not re.search(rf"^\s+{key}: *\S", text, re.M):
            errors.append(f"needs a {key} annotation")
    url = re.search(r"^\s+runbook_url: *(\S+)", text, re.M)
    want = RUNBOOK_BASE + name.lower()
    if not url or url.group(1) != want:
        errors.append(f"runbook_url must be {want}")
    elif name.lower() not in runbook_anchors:
        errors.append(f"docs/alerts.md has no heading #{name.lower()}")
    return errors


def test_cases(paths):
    """{alert name: set of 'fires' / 'quiet'} over the test files."""
    cases = {}
    for path in paths:
        name = None
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"\s*alertname: *(\S+)", line)
                if m:
                    name = m.group(1)
                    continue
                m = re.match(r"\s*exp_alerts:(.*)$", line)
                if m and name:
                    kind = "quiet" if m.group(1).strip() == "[]" else "fires"
                    cases.setdefault(name, set()).add(kind)
                    name = None
    return cases


def metrics_read(path):
    names = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("#"):
                continue
            for m in METRIC.finditer(line):
                names.add(re.sub(r"_(bucket|sum|count)$", "", m.group(1)))
    return names


def documented_metrics(metrics_md):
    with open(metrics_md, encoding="utf-8") as f:
        return set(re.findall(r"`(cosched_[a-z0-9_]+)`", f.read()))


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1
                           else os.path.join(os.path.dirname(__file__), "..", ".."))
    tool = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("PROMTOOL", "/usr/bin/promtool")
    rule_files = sorted(glob.glob(os.path.join(root, "deploy", "prometheus", "*.yml")))
    test_files = sorted(glob.glob(os.path.join(root, "tests", "prometheus", "*_test.yml")))
    if not rule_files or not test_files:
        print(f"no rule files or no test files under {root}")
        return 1

    failed = promtool(tool, ["check", "rules"] + rule_files)
    if failed:
        print(failed)
        return 1
    failed = promtool(tool, ["test", "rules"] + test_files)
    if failed:
        print(failed)
        return 1

    sys.path.insert(0, os.path.join(root, "tests", "common"))
    from docs_links_test import anchors  # GitHub's heading slugs, as docs_links checks them

    alerts_md = os.path.join(root, "docs", "alerts.md")
    runbook_anchors = anchors(alerts_md)
    errors = []
    alerts = {}
    for path in rule_files:
        rel = os.path.relpath(path, root)
        for name, (lines, n) in alerts_in(path).items():
            if name in alerts:
                errors.append(f"{rel}:{n}: {name}: a second alert of that name")
            alerts[name] = True
            errors += [f"{rel}:{n}: {name}: {e}" for e in check_alert(name, lines, runbook_anchors)]
        documented = documented_metrics(os.path.join(root, "docs", "metrics.md"))
        for metric in sorted(metrics_read(path) - documented):
            errors.append(f"{rel}: {metric} is not a metric docs/metrics.md documents")

    with open(alerts_md, encoding="utf-8") as f:
        headings = re.findall(r"^#{2,6} +(Cosched\w+) *$", f.read(), re.M)
    for heading in headings:
        if heading not in alerts:
            errors.append(f"docs/alerts.md: runbook {heading} is not an alert of the rules")

    cases = test_cases(test_files)
    for name in sorted(alerts):
        missing = {"fires", "quiet"} - cases.get(name, set())
        for kind in sorted(missing):
            what = "fires" if kind == "fires" else "does not fire (exp_alerts: [])"
            errors.append(f"{name}: no test where it {what}")
    for name in sorted(set(cases) - set(alerts)):
        errors.append(f"a test names {name}, which is not an alert of the rules")

    for e in errors:
        print(e)
    print(f"{len(rule_files)} rule files, {len(alerts)} alerts, each tested firing and not: "
          f"{len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
