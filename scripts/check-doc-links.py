#!/usr/bin/env python3
"""Check that every relative link and #anchor in README.md and docs/**/*.md resolves.

    python3 scripts/check-doc-links.py        # exit status 1 and one line per broken link

Anchors follow GitHub's rule: the heading's text, lower-cased, with everything but
letters, digits, spaces, hyphens and underscores removed, spaces turned into hyphens;
a repeated heading gets -1, -2, ... Links to http(s) and mailto are not checked.
Links inside fenced code blocks and inline code are ignored.
"""
import os
import re
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def slug(text):
    text = re.sub(r"`", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    out = []
    for ch in text.strip().lower():
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN":
            out.append("-" if ch == " " else ch)
    return "".join(out)


def strip_code(lines):
    """Lines outside fenced code blocks, with inline code removed."""
    fence = None
    for n, line in enumerate(lines, 1):
        s = line.lstrip()
        if fence is None and (s.startswith("```") or s.startswith("~~~")):
            fence = s[:3]
            continue
        if fence is not None:
            if s.startswith(fence):
                fence = None
            continue
        yield n, re.sub(r"`[^`]*`", "", line)


def anchors(path, cache={}):
    """The anchors of a Markdown file's headings (outside fenced code)."""
    if path not in cache:
        seen = {}
        found = set()
        fence = None
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for line in lines:
            s = line.lstrip()
            if fence is None and (s.startswith("```") or s.startswith("~~~")):
                fence = s[:3]
                continue
            if fence is not None:
                if s.startswith(fence):
                    fence = None
                continue
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(2))
                k = seen.get(base, 0)
                found.add(base if k == 0 else f"{base}-{k}")
                seen[base] = k + 1
        cache[path] = found
    return cache[path]


def files():
    yield os.path.join(ROOT, "README.md")
    for d, _, names in os.walk(os.path.join(ROOT, "docs")):
        for name in sorted(names):
            if name.endswith(".md"):
                yield os.path.join(d, name)


def main():
    bad = 0
    count = 0
    for path in files():
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        for n, line in strip_code(lines):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target):
                    continue
                count += 1
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
                rel = os.path.relpath(path, ROOT)
                if not os.path.exists(dest):
                    print(f"{rel}:{n}: {target}: no such file")
                    bad += 1
                    continue
                if anchor:
                    if not dest.endswith(".md"):
                        print(f"{rel}:{n}: {target}: anchor into a file that is not Markdown")
                        bad += 1
                    elif anchor not in anchors(dest):
                        print(f"{rel}:{n}: {target}: no heading with anchor #{anchor}")
                        bad += 1
    print(f"{count} relative links checked, {bad} broken", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
