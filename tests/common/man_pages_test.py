#!/usr/bin/python3
"""The man pages say what the programs do: checked against their --help.

For csd(8), cs-agent(8) and csctl(1): every option a program's --help
lists (but --help) has an entry in its man page's options section (a
.B or .BI line after .TP naming it), and every option entry there is one
the program takes. For csctl, every command its --help lists has an entry
in COMMANDS, and every entry there names a command csctl has.

Usage: man_pages_test.py SOURCE_DIR CSD CS_AGENT CSCTL
"""
import re
import subprocess
import sys

OPTION = re.compile(r"^\s{2}(?:-\w,)?(--[a-z][a-z0-9-]*)")
SUBCOMMAND = re.compile(r"^\s{2}([a-z][a-z0-9-]*)\s")
# A man page entry: the .B/.BI line after .TP; its options as \-\-name
# (or \-o), its first word the command it describes.
MAN_OPTION = re.compile(r"\\-\\-([a-z][a-z0-9\\-]*)|\\-([a-z])\b")


def help_text(binary):
    run = subprocess.run([binary, "--help"], capture_output=True, text=True, check=False)
    return run.stdout + run.stderr


def help_options(text):
    options = set()
    section = None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            section = line
            continue
        if section == "Options:":
            m = OPTION.match(line)
            if not m or m.group(1) == "--help":
                continue
            options.add(m.group(1))
            if "," in line.split()[0]:
                options.add(line.split()[0].split(",")[0])  # its short form too
    return options


def help_subcommands(text):
    names = set()
    section = None
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            section = line
            continue
        if section == "Subcommands:":
            m = SUBCOMMAND.match(line)
            if m:
                names.add(m.group(1))
    return names


def sections(path):
    """Section name -> the entry lines (.B/.BI right after .TP) in it."""
    result = {}
    current = None
    after_tp = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(".SH "):
                current = line[4:].strip('"')
                result.setdefault(current, [])
                after_tp = False
                continue
            if line.startswith(".TP"):
                after_tp = True
                continue
            if after_tp and current is not None and re.match(r"^\.B[I]? ", line):
                result[current].append(line)
            after_tp = False
    return result


def man_options(entries):
    options = set()
    for line in entries:
        for long_name, short_name in MAN_OPTION.findall(line):
            options.add("--" + long_name.replace("\\-", "-") if long_name else "-" + short_name)
    return options


def man_commands(entries):
    """The first word of each entry, and the commands joined by \\fR, \\fB."""
    names = set()
    for line in entries:
        text = re.sub(r"^\.BI? ", "", line).replace('"', "").replace("\\-", "-")
        for part in re.split(r"\\fR, \\fB", text):
            word = part.split()[0] if part.split() else ""
            if word:
                names.add(word.split("|")[0])
    return names


def check(source, csd, agent, csctl):
    errors = []
    for page, binary, section in ((f"{source}/docs/man/csd.8", csd, "OPTIONS"),
                                  (f"{source}/docs/man/cs-agent.8", agent, "OPTIONS"),
                                  (f"{source}/docs/man/csctl.1", csctl, "OPTIONS")):
        name = page.rsplit("/", 1)[1]
        text = help_text(binary)
        have = help_options(text)
        if len(have) < 3:
            errors.append(f"{name}: {binary} --help lists {len(have)} options: is the parser broken?")
            continue
        documented = man_options(sections(page).get(section, []))
        for option in sorted(have - documented):
            errors.append(f"{name}: {option} ({binary} --help) has no entry in {section}")
        for option in sorted(documented - have):
            errors.append(f"{name}: {section} documents {option}, which {binary} does not take")
    text = help_text(csctl)
    commands = help_subcommands(text)
    entries = man_commands(sections(f"{source}/docs/man/csctl.1").get("COMMANDS", []))
    if len(commands) < 5:
        errors.append(f"csctl.1: csctl --help lists {len(commands)} commands: is the parser broken?")
    for command in sorted(commands - entries):
        errors.append(f"csctl.1: the command {command} (csctl --help) has no entry in COMMANDS")
    for command in sorted(entries - commands):
        errors.append(f"csctl.1: COMMANDS has an entry for {command}, which csctl does not have")
    return errors


def self_test():
    assert man_options(['.BI "\\-\\-ca " FILE " \\-\\-cert " FILE']) == {"--ca", "--cert"}
    assert man_options([".B \\-o json"]) == {"-o"}
    assert man_commands(['.B "place\\fR, \\fBexplain\\fR, \\fBplan \\-\\-dry\\-run"']) == \
        {"place", "explain", "plan"}
    assert man_commands(['.B "policy get|set|ls"']) == {"policy"}
    assert help_options("Options:\n  -o,--output TEXT  x\n  --help  y\n") == {"--output", "-o"}


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    self_test()
    errors = check(*sys.argv[1:])
    for e in errors:
        print(e)
    print(f"{len(errors)} difference(s) between the man pages and the programs")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
