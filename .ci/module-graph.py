#!/usr/bin/env python3
"""Fails when the top-level modules of src/ depend on each other in a cycle.

A module is a file `src/NAME.rs` or a directory `src/NAME/`; it depends on
every other module it names as `crate::OTHER` (in a `use` line or inline).
`src/lib.rs` only declares and re-exports, and `src/main.rs` is the binary
over the library, so both are left out. Prints the
dependency order (each module after what it uses) when there is no cycle,
and every cycle when there is one.

With `--with-comments`, mentions inside comments count too, as a plain text
scan of `crate::` would count them: a doc link from a lower module to a
higher one (`[X](crate::higher::X)`) then shows as the cycle it reads as.
"""
import pathlib
import re
import sys

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"
# Cycles still to be untangled, each printed on every run (none now: any
# cycle fails at once).
KNOWN = []
MENTION = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
COMMENT = re.compile(r"//.*")


def modules():
    found = {}
    for path in sorted(SRC.iterdir()):
        if path.name in ("lib.rs", "main.rs"):
            continue
        if path.is_file() and path.suffix == ".rs":
            found[path.stem] = [path]
        elif path.is_dir():
            found[path.name] = sorted(path.rglob("*.rs"))
    return found


def graph(found, with_comments=False):
    edges = {name: set() for name in found}
    for name, files in found.items():
        for path in files:
            for line in path.read_text().splitlines():
                # Comments (doc examples included) are not dependencies,
                # unless asked for.
                code = line if with_comments else COMMENT.sub("", line)
                for other in MENTION.findall(code):
                    if other in found and other != name:
                        edges[name].add(other)
    return edges


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


def order(edges):
    done, result = set(), []

    def visit(node):
        if node in done:
            return
        done.add(node)
        for nxt in sorted(edges[node]):
            visit(nxt)
        result.append(node)

    for node in sorted(edges):
        visit(node)
    return result


def main():
    edges = graph(modules(), with_comments="--with-comments" in sys.argv[1:])
    found = cycles(edges)
    for component in [c for c in found if set(c) in KNOWN]:
        print("module-graph: KNOWN CYCLE, to untangle: " + " <-> ".join(component))
    found = [c for c in found if set(c) not in KNOWN]
    if found:
        print("module-graph: cycles between src/ modules:")
        for component in found:
            inside = {m: sorted(edges[m] & set(component)) for m in component}
            print("  " + ", ".join(f"{m} -> {{{', '.join(d)}}}" for m, d in inside.items()))
        return 1
    print("module-graph: no other cycle; bottom to top: " + " < ".join(order(edges)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
