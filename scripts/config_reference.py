#!/usr/bin/python3
"""The configuration files' man pages, made from proto/cosched/v1/config.proto.

csd.yaml(5), cs-agent.yaml(5) and csctl.yaml(5) list every key the programs
read (common/config_loader.cc reads YAML into these messages, one key per
field, and refuses any other key), each with the comment the proto gives
it. The pages are kept in docs/man/ and installed by the packages;
tests/common/config_reference_test.py fails when they differ from what
this script makes, so they cannot drift from the proto.

Usage: config_reference.py PROTO OUT_DIR   (writes the three pages)
       config_reference.py PROTO --check DIR   (exit 1 naming a page that differs)
"""
import os
import re
import sys

PAGES = [
    # (file, message, program, section of the program's page, what it is)
    ("csd.yaml", "CsdConfig", "csd", 8, "the cosched server"),
    ("cs-agent.yaml", "AgentConfig", "cs-agent", 8, "the cosched agent of a hypervisor"),
    ("csctl.yaml", "CsctlConfig", "csctl", 1, "the cosched command-line client"),
]

SCALARS = {
    "string": "string", "bool": "true or false", "int32": "integer", "int64": "integer",
    "uint32": "integer", "uint64": "integer", "double": "number", "float": "number",
}


class Field:
    def __init__(self, name, type_, repeated, optional, comment):
        self.name, self.type, self.repeated, self.optional = name, type_, repeated, optional
        self.comment = comment


def parse(proto_text):
    """Message name -> (its comment, [Field])."""
    messages = {}
    comment = []
    stack = []  # (name, comment, fields)
    for raw in proto_text.split("\n"):
        line = raw.strip()
        if line.startswith("//"):
            comment.append(line[2:].strip())
            continue
        m = re.match(r"^message (\w+) \{$", line)
        if m:
            stack.append((m.group(1), " ".join(comment), []))
            comment = []
            continue
        if line == "}" and stack:
            name, text, fields = stack.pop()
            messages[name] = (text, fields)
            comment = []
            continue
        m = re.match(r"^map<(\w+), *(\w+)> (\w+) = \d+;\s*(?://\s*(.*))?$", line)
        if m and stack:
            text = " ".join(comment + ([m.group(4)] if m.group(4) else []))
            stack[-1][2].append(Field(m.group(3), f"map<{m.group(1)},{m.group(2)}>", False, False,
                                      text))
            comment = []
            continue
        m = re.match(r"^(repeated |optional )?([\w.]+) (\w+) = \d+;\s*(?://\s*(.*))?$", line)
        if m and stack:
            text = " ".join(comment + ([m.group(4)] if m.group(4) else []))
            stack[-1][2].append(Field(m.group(3), m.group(2), m.group(1) == "repeated ",
                                      m.group(1) == "optional ", text))
            comment = []
            continue
        if not line:
            comment = []
    return messages


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def entries(messages, message, prefix):
    """(key path, type text, comment) for every key under `message`."""
    out = []
    for f in messages[message][1]:
        key = f"{prefix}{f.name}"
        if f.type in messages:
            kind = "a list of mappings, each with the keys below" if f.repeated else \
                "a mapping with the keys below"
            own = messages[f.type][0]
            comment = f.comment + (" " + own if own and own not in f.comment else "")
            out.append((key, kind, comment.strip()))
            out += entries(messages, f.type, key + ("[]." if f.repeated else "."))
        elif f.type.startswith("map<"):
            key_type, value_type = f.type[4:-1].split(",")
            out.append((key, f"a mapping of {SCALARS.get(key_type, key_type)} keys to "
                             f"{SCALARS.get(value_type, value_type)} values", f.comment))
        else:
            kind = SCALARS.get(f.type, f.type)
            if f.repeated:
                kind = f"a list of {kind}s" if kind != "true or false" else "a list of booleans"
            out.append((key, kind, f.comment))
    return out


def page(messages, file, message, program, section, what):
    lines = [
        f'.TH {file.upper()} 5 "" "cosched" "File Formats"',
        ".SH NAME",
        f"{roff(file)} \\- configuration of {roff(program)}, {roff(what)}",
        ".SH SYNOPSIS",
        f".I /etc/cosched/{roff(file)}",
        ".SH DESCRIPTION",
        "YAML: a mapping of the keys below to their values, read by",
        f".BR {roff(program)} ({section}).",
        "A key not listed here, or given twice, is an error naming it, and the",
        "program does not start (or, on a reload, keeps its configuration).",
        "An unset key takes the default its entry names. A nested key is shown",
        "by its path: for",
        ".BR tls.cert_file ,",
        "write",
        ".B cert_file",
        "under",
        ".BR tls: ;",
        ".B []",
        "marks a list, each of whose items is a mapping.",
        "The package ships a commented example of this file.",
        ".PP",
        f"Made from the comments of cosched.v1.{message} in",
        ".I proto/cosched/v1/config.proto",
        "by scripts/config_reference.py; a test keeps the two the same.",
        ".SH KEYS",
    ]
    for key, kind, comment in entries(messages, message, ""):
        lines += [".TP", f".B {roff(key)}", f"({roff(kind)}) {roff(comment) if comment else ''}".rstrip()]
    lines += [".SH SEE ALSO", f".BR {roff(program)} ({section}),",
              ".I docs/operating.md", "and", ".I docs/install.md", "in the cosched sources."]
    return "\n".join(lines) + "\n"


def pages(proto):
    with open(proto) as f:
        messages = parse(f.read())
    return {f"{file}.5": page(messages, file, message, program, section, what)
            for file, message, program, section, what in PAGES}


def main(argv):
    if len(argv) == 3:
        for name, text in pages(argv[1]).items():
            with open(os.path.join(argv[2], name), "w") as f:
                f.write(text)
        return 0
    if len(argv) == 4 and argv[2] == "--check":
        stale = []
        for name, text in pages(argv[1]).items():
            path = os.path.join(argv[3], name)
            try:
                with open(path) as f:
                    same = f.read() == text
            except OSError:
                same = False
            if not same:
                stale.append(path)
        if stale:
            print("config_reference: " + ", ".join(stale) + " differ from proto/cosched/v1/config.proto:"
                  " run scripts/config_reference.py proto/cosched/v1/config.proto docs/man")
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
