#!/usr/bin/env python3
"""Writes proxy/layout/hot.ld: the functions a profile of the proxy ran,
placed together at the start of the binary's text.

A page fault on the binary's code maps the whole 64 KiB window around it
(the kernel's fault-around), so the resident code is the number of windows
the run touches, not the size of the code it runs. The request path runs
about 1 MB of code spread over most of the 9 MB of text; put together it
fits a fraction of the windows.

Usage (tools/code_layout.sh runs the whole procedure): each binary,
built without the layout, with the callgrind --dump-instr profiles of its
runs, the first binary's functions first:

    python3 tools/code_layout.py BINARY=PROFILE[,PROFILE...] ... \
        > proxy/layout/hot.ld

A function is named by its symbol without the hash when that name is
unique in the binary (so the script still matches after a toolchain or
dependency change moves the hashes), and with its hash when a generic
function has several instances of one name (so the others stay out). A
pattern that matches nothing costs nothing; one whose hash moved leaves
its function where the linker would have put it anyway.
"""

import bisect
import collections
import re
import subprocess
import sys

HASH = re.compile(r"17h[0-9a-f]{16}E")
V0_CRATE = re.compile(r"Cs[0-9A-Za-z]+_")


def executed(profile, binary_name):
    """Instruction addresses a callgrind --dump-instr profile ran, with
    their cost, in objects named like the binary."""
    names, current, pos, call = {}, None, 0, False
    cost = collections.Counter()
    for line in open(profile):
        if line.startswith(("ob=", "cob=")):
            # An object is named once, where it first appears, as the
            # current object or as a callee's.
            m = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line.strip())
            if m.group(2):
                names[m.group(1)] = m.group(2)
            if line.startswith("ob="):
                current = names.get(m.group(1))
            continue
        if line.startswith("calls="):
            call = True
            continue
        if not line or line[0] not in "0123456789+-*":
            continue
        fields = line.split()
        tok = fields[0]
        if tok.startswith("0x"):
            pos = int(tok, 16)
        elif tok[0] in "+-":
            pos += int(tok[1:], 0) * (1 if tok[0] == "+" else -1)
        if current and current.endswith("/" + binary_name):
            # With `positions: instr line` the cost is the third field; a
            # call's line carries the callee's inclusive cost, counted once.
            own = fields[-1] if len(fields) == 3 and fields[-1].isdigit() else "1"
            cost[pos] += 1 if call else int(own)
        call = False
    return cost


def functions(binary):
    """(start, size, symbol) of every function in the binary's text."""
    out = subprocess.run(
        ["nm", "-S", "--defined-only", binary], capture_output=True, text=True, check=True
    ).stdout
    syms = []
    for line in out.splitlines():
        p = line.split()
        if len(p) == 4 and p[2] in "tTwW" and int(p[1], 16) > 0:
            syms.append((int(p[0], 16), int(p[1], 16), p[3]))
    syms.sort()
    return syms


def unsuffixed(symbol):
    """The symbol without the suffix LTO adds to a renamed local."""
    return re.sub(r"(\.llvm)?\.\d+$", "", symbol)


def stem(symbol):
    """The symbol without what a rebuild may change: a legacy name's hash,
    a v0 name's crate disambiguators (the standard library's are v0)."""
    symbol = unsuffixed(symbol)
    m = HASH.search(symbol)
    if m:
        return symbol[: m.start()] + "17h*"
    if symbol.startswith("_R"):
        return V0_CRATE.sub("Cs*_", symbol)
    return symbol


def ranked(binary, profiles):
    """A pattern and the size of each function of the binary the profiles
    ran, most run first."""
    syms = functions(binary)
    starts = [s[0] for s in syms]
    name = binary.rsplit("/", 1)[-1]
    cost = collections.Counter()
    for profile in profiles:
        for addr, c in executed(profile, name).items():
            i = bisect.bisect_right(starts, addr) - 1
            if i >= 0 and addr < syms[i][0] + syms[i][1]:
                cost[syms[i][2]] += c
    size = {s[2]: s[1] for s in syms}
    instances = collections.Counter(stem(s[2]) for s in syms)
    return [(pattern(symbol, instances), size[symbol]) for symbol, _ in cost.most_common()]


def pattern(symbol, instances):
    """A section-name pattern that matches this function and no other of
    the binary, given how many functions share each stem."""
    base = stem(symbol)
    if base == symbol:
        return symbol  # C, or a Rust symbol with an unmangled name
    if instances[base] == 1:
        return base.rstrip("*") + "*"
    return unsuffixed(symbol) + "*"


def main():
    pairs = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not pairs or any(len(p) != 2 for p in pairs):
        sys.exit(__doc__)
    seen, pats, total = set(), [], 0
    # Each binary's functions in the order of its profile, the first
    # binary's first; a function already named keeps its place.
    for binary, profiles in pairs:
        for pat, size in ranked(binary, profiles.split(",")):
            if pat not in seen:
                seen.add(pat)
                pats.append(pat)
                total += size
    print("/* Generated by tools/code_layout.py from profiles of the proxy; see")
    print("   docs/speed.md. The functions the profiles ran, most run first, ahead")
    print("   of the rest of the text: the request path in as few pages as it fits. */")
    print("SECTIONS {")
    print("  .text.hot : {")
    for p in pats:
        # `.text.*`: the function's section under any of the prefixes
        # compilers give (LLVM's `unlikely.` and `hot.`, GCC's `startup.`
        # and `exit.` for C constructors and destructors) or none.
        print("    *(.text.*%s)" % p)
    print("  }")
    print("} INSERT BEFORE .text;")
    print("%d patterns, %d KB of code" % (len(pats), total // 1024), file=sys.stderr)


if __name__ == "__main__":
    main()
