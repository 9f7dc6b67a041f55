#!/usr/bin/env python3
# Lists functions longer than N lines (default 100) in src/ and apps/ (or the folders given), longest first: a
# brace-counting scan, not a parser (comments and string literals are skipped; a lambda counts toward the
# function around it). Usage: scripts/long_functions.py [N] [FOLDER...]; exit status 1 when one is found.
import os
import re
import sys


def code_of(line, state):
    """The line without comments and string contents; state["block"] carries an open /* */ comment."""
    out, i = [], 0
    while i < len(line):
        if state["block"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["block"], i = False, end + 2
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"], i = True, i + 2
            continue
        raw = re.match(r'R"([^(]*)\(', line[i:])
        if raw:
            end = line.find(")" + raw.group(1) + '"', i)
            if end >= 0:
                out.append('""')
                i = end + len(raw.group(1)) + 2
                continue
        if line[i] in "\"'":
            quote, j = line[i], i + 1
            while j < len(line) and line[j] != quote:
                j += 2 if line[j] == "\\" else 1
            out.append(quote * 2)
            i = j + 1
            continue
        out.append(line[i])
        i += 1
    return "".join(out)


def long_functions(path, limit):
    """(lines, first line, signature) of each function body in `path` longer than `limit` lines."""
    state, stack, found = {"block": False}, [], []
    start, name, before = 0, "", ""
    with open(path, errors="replace") as source:
        for number, raw in enumerate(source, 1):
            line = code_of(raw, state)
            for column, char in enumerate(line):
                if char == "{":
                    context = (before + " " + line[:column]).strip()
                    if "fn" in stack:
                        stack.append("inner")
                    elif re.search(r"\bnamespace\b[^;{}]*$", context) or re.search(r'extern\s+""\s*$', context):
                        stack.append("namespace")
                    elif re.search(r"\b(class|struct|union|enum)\b[^;(){}]*$", context):
                        stack.append("type")
                    elif re.search(r"\)[^;{}()]*$", context):
                        stack.append("fn")
                        start, name = number, re.sub(r"\s+", " ", context)[-90:]
                    else:
                        stack.append("other")
                elif char == "}" and stack and stack.pop() == "fn" and number - start + 1 > limit:
                    found.append((number - start + 1, start, name))
            if line.strip():
                before = "" if line.strip().endswith((";", "}", "{")) else line
    return found


def main():
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    roots = sys.argv[2:] or ["src", "apps"]
    rows = []
    for root in roots:
        for folder, _, files in os.walk(root):
            for file in files:
                if file.endswith((".cpp", ".hpp", ".h", ".cc")):
                    path = os.path.join(folder, file)
                    rows += [(lines, path, first, name) for lines, first, name in long_functions(path, limit)]
    for lines, path, first, name in sorted(rows, reverse=True):
        print(f"{lines:4d} {path}:{first} {name}")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
