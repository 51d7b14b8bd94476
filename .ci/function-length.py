#!/usr/bin/env python3
"""Fails on a function of more than 80 lines in a published crate's sources
(src/, proxy/src/, testkit/src/), tests included: a function should read at
once. A function's length runs from its `fn` line to its closing brace,
doc comments and attributes left out. Exits 1 naming each, longest first.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = ["src", "proxy/src", "testkit/src"]
LIMIT = 80
FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def code_only(line, state):
    """The line with string literals and comments blanked; `state` carries a
    block comment or raw string across lines."""
    out, i, n = [], 0, len(line)
    while i < n:
        if state["block"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["block"], i = False, end + 2
        elif state["raw"]:
            end = line.find('"' + state["raw"], i)
            if end < 0:
                return "".join(out)
            i, state["raw"] = end + 1 + len(state["raw"]), ""
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            state["block"], i = True, i + 2
        elif (m := re.match(r'b?r(#*)"', line[i:])) and (i == 0 or not line[i - 1].isalnum()):
            state["raw"], i = m.group(1), i + m.end()
        elif line[i] == '"':
            j = i + 1
            while j < n and line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            if j >= n:
                state["string"] = True
                return "".join(out)
            i = j + 1
        elif line[i] == "'" and re.match(r"'(\\.|[^\\'])'", line[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", line[i:]).group(0))
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def functions(path):
    lines = path.read_text(encoding="utf-8").splitlines()
    state = {"block": False, "raw": "", "string": False}
    clean = []
    for line in lines:
        if state["string"]:
            end = re.search(r'(?<!\\)"', line)
            if not end:
                clean.append("")
                continue
            state["string"] = False
            line = " " * (end.end()) + line[end.end():]
        clean.append(code_only(line, state))
    for start, line in enumerate(clean):
        match = FN.match(line)
        if not match:
            continue
        depth, opened = 0, False
        for end in range(start, len(clean)):
            text = clean[end]
            if not opened and ";" in text and "{" not in text:
                break
            depth += text.count("{") - text.count("}")
            opened = opened or "{" in text
            if opened and depth <= 0:
                yield match.group(1), start + 1, end - start + 1
                break


def main():
    long = []
    for crate in CRATES:
        for path in sorted((ROOT / crate).rglob("*.rs")):
            for name, line, length in functions(path):
                if length > LIMIT:
                    long.append((length, f"{path.relative_to(ROOT)}:{line}", name))
    for length, where, name in sorted(long, reverse=True):
        print(f"function-length: {where} {name}: {length} lines")
    if long:
        print(f"function-length: {len(long)} functions over {LIMIT} lines")
        return 1
    print(f"function-length: no function over {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
