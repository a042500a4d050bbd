#!/usr/bin/python3
"""The shape of cosched's C++ tree, for reviews of its structure.

Prints, for the project's own code (not tests, fuzzers or benchmarks):
  - the folder graph: which folder includes headers of which (server/'s
    subfolders each count as a folder), with the number of includes;
  - the classes with the most public methods, and headers by length;
  - the longest function bodies in .cc files.

A reading of the text, not a C++ parser: good enough to compare two trees
measured the same way (scripts/code_shape.py [ROOT]), not exact to the line.
"""

import collections
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), ".."))
CODE_DIRS = ["agent", "cli", "common", "discovery", "etcd", "host", "metrics",
             "policy", "server", "store", "telemetry"]
INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def sources():
    for top in CODE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if name.endswith((".h", ".cc")):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, ROOT), open(path, encoding="utf-8").read()


def folder(path):
    return os.path.dirname(path)


def folder_graph(files):
    edges = collections.Counter()
    for path, text in files:
        for included in INCLUDE.findall(text):
            target = folder(included)
            if target and target != folder(path) and target.split("/")[0] in CODE_DIRS:
                edges[(folder(path), target)] += 1
    print("## Folder graph (includer -> included: includes)")
    for (a, b), n in sorted(edges.items()):
        print(f"  {a} -> {b}: {n}")
    # A cycle among folders is a defect of the tree: name any.
    graph = collections.defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    cycles = set()

    def visit(node, stack):
        for nxt in graph[node]:
            if nxt in stack:
                cycles.add(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif len(stack) < 12:
                visit(nxt, stack + [nxt])
    for start in list(graph):
        visit(start, [start])
    print(f"  cycles: {len(cycles)}")
    for cycle in sorted(cycles)[:10]:
        print(f"    {cycle}")


CLASS = re.compile(r"^(?:class|struct) (\w+)(?: final)?(?: : [^{]*)? \{", re.M)


def classes(files):
    found = []
    for path, text in files:
        if not path.endswith(".h"):
            continue
        for m in CLASS.finditer(text):
            head = text[m.start():m.start() + 6]
            kind_private = head.startswith("class")
            body_start = m.end() - 1
            n = public_methods_of(text, body_start, kind_private)
            found.append((n, m.group(1), path))
    found.sort(reverse=True)
    print("## Classes by public methods (top 10)")
    for n, name, path in found[:10]:
        print(f"  {n:3d}  {name}  ({path})")


def public_methods_of(text, brace, starts_private):
    access = "private" if starts_private else "public"
    depth = 0
    count = 0
    statement = []
    i = brace
    n = len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            if i < 0:
                break
            continue
        if c == "{":
            depth += 1
            if depth == 2 and access == "public" and is_method("".join(statement)):
                count += 1
            if depth == 2:
                statement = []
        elif c == "}":
            depth -= 1
            if depth == 0:
                break
            if depth == 1:
                statement = []
        elif depth == 1:
            if c == ";":
                if access == "public" and is_method("".join(statement)):
                    count += 1
                statement = []
            elif c == ":" and re.fullmatch(r"\s*(public|private|protected)\s*", "".join(statement)):
                access = "".join(statement).strip()
                statement = []
            else:
                statement.append(c)
        i += 1
    return count


def is_method(statement):
    s = " ".join(statement.split())
    if "(" not in s or s.startswith(("using ", "friend ", "static_assert", "template <typename T> using")):
        return False
    if s.startswith(("struct ", "class ", "enum ")):
        return False
    # A data member initialised with a call: "Foo bar_{...}" or "x = f()".
    before_paren = s.split("(")[0]
    if "=" in before_paren:
        return False
    return True


def functions(files):
    found = []
    for path, text in files:
        if not path.endswith(".cc"):
            continue
        lines = text.split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            if re.match(r"^[A-Za-z~]", line) and "(" in line and not line.startswith(
                    ("namespace", "using", "static_assert", "#", "struct", "class", "enum", "template", "}")):
                # Find the line that opens the body at column 0's end.
                j = i
                while j < len(lines) and not lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith(";"):
                    j += 1
                if j < len(lines) and lines[j].rstrip().endswith("{"):
                    k = j + 1
                    while k < len(lines) and lines[k] != "}" and not lines[k].startswith("}"):
                        k += 1
                    name = re.match(r"^[^(]*?([\w:~]+)\s*\(", line)
                    found.append((k - i + 1, name.group(1) if name else line[:40], f"{path}:{i + 1}"))
                    i = k + 1
                    continue
            i += 1
    found.sort(reverse=True)
    print("## Longest functions (lines, top 10)")
    for n, name, where in found[:10]:
        print(f"  {n:4d}  {name}  ({where})")
    over = [f for f in found if f[0] > 80]
    print(f"  functions over 80 lines: {len(over)}")


def headers(files):
    sizes = sorted(((text.count("\n"), path) for path, text in files if path.endswith(".h")), reverse=True)
    print("## Longest headers (lines, top 5)")
    for n, path in sizes[:5]:
        print(f"  {n:4d}  {path}")
    server = [(p, t) for p, t in files if p.startswith("server/")]
    print(f"## server/: {len(server)} files, {sum(t.count(chr(10)) for _, t in server)} lines, "
          f"{sum(1 for p, _ in server if folder(p) == 'server')} at its root")


def main():
    files = list(sources())
    folder_graph(files)
    classes(files)
    headers(files)
    functions(files)


if __name__ == "__main__":
    main()
