#!/usr/bin/python3
"""Every relative link in README.md and docs/*.md resolves.

A link to a file must name one that exists (relative to the page that
links it); a #anchor must be a heading of the page it points to, by
GitHub's heading slugs (lower case, punctuation dropped, spaces to
hyphens, -1, -2, ... for repeats). External links (http:, https:,
mailto:) are not checked. The pages also may not cite design notes that
are not in the repository (ARCHITECTURE.md, CALIBRATION.md).

Usage: docs_links_test.py [SOURCE_DIR]   (default: two levels up)
"""
import os
import re
import sys

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) or ![alt](target); target up to whitespace or ')'.
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
NOT_IN_REPO = ("ARCHITECTURE.md", "CALIBRATION.md")


def slug(heading_text):
    text = heading_text
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)                      # inline HTML
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)                     # keeps letters, digits, _ and -
    return text.replace(" ", "-")


def lines_outside_code(path):
    """(line number, text) of lines not in fenced or indented code blocks."""
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            yield n, line


def anchors(path, cache={}):
    if path not in cache:
        seen = {}
        result = set()
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
        cache[path] = result
    return cache[path]


def check(root):
    pages = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    pages += sorted(os.path.join(docs, p) for p in os.listdir(docs) if p.endswith(".md"))
    errors = []
    links = 0
    for page in pages:
        rel = os.path.relpath(page, root)
        with open(page, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                for name in NOT_IN_REPO:
                    if name in line:
                        errors.append(f"{rel}:{n}: cites {name}, which is not in the repository")
        for n, line in lines_outside_code(page):
            for m in LINK.finditer(INLINE_CODE.sub("", line)):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                links += 1
                path_part, _, anchor = target.partition("#")
                dest = page if not path_part else os.path.normpath(
                    os.path.join(os.path.dirname(page), path_part))
                if not os.path.exists(dest):
                    errors.append(f"{rel}:{n}: {target}: no such file {os.path.relpath(dest, root)}")
                    continue
                if anchor:
                    if not dest.endswith(".md"):
                        errors.append(f"{rel}:{n}: {target}: an anchor into a file that is not markdown")
                    elif anchor not in anchors(dest):
                        errors.append(f"{rel}:{n}: {target}: no heading #{anchor} in "
                                      f"{os.path.relpath(dest, root)}")
    return pages, links, errors


def self_test():
    assert slug("Placement and what-if answers from csd: `Place`, `ExplainVM`") == \
        "placement-and-what-if-answers-from-csd-place-explainvm"
    assert slug("cosched and libvirt's `sched_core`") == "cosched-and-libvirts-sched_core"
    assert slug("Placement (library: `policy/placement.h`)") == "placement-library-policyplacementh"
    assert slug("Sibling-sharing collector (cs-agent)") == "sibling-sharing-collector-cs-agent"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    root = os.path.abspath(root)
    self_test()
    pages, links, errors = check(root)
    for e in errors:
        print(e)
    print(f"{len(pages)} pages, {links} relative links, {len(errors)} broken")
    if links < 20:
        print("too few links found: is the parser broken?")
        return 1
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
