#!/usr/bin/env python3
"""Fails on a cycle between modules anywhere in a crate's src/, and when a
public module depends on a private one; for each crate of the workspace
(the library's src/, proxy/src/, testkit/src/), or for the folders given
as arguments.

A module is a file of src/ (`lib.rs` and a folder's `mod.rs` stand for their
folder; `main.rs`, the binary over the library, is left out). It depends on
every module it names by a path through `crate::`, `super::` or `self::`, or
through one of its own `mod` children, in `use` lines (grouped ones
expanded) and inline. A path is followed through every `use` it meets
(`pub`, `pub(crate)` or private, globs too) to the deepest module that holds
the item: `crate::RefusalGuardLayer` is `guard/layer`. Inline
`#[cfg(test)] mod tests { .. }` blocks are left out; test files count.

A dependency on oneself or on an ancestor does not count: a folder's
`mod.rs` is the folder's face, which declares and re-exports its children
and defines what they share.

For every folder (src/ included) the graph of its children, a subfolder
standing for every file under it, must have no cycle. The order of each
folder's children, bottom to top, is printed; a cycle is printed with the
file dependencies that make it.

The public modules of PUBLIC_ONLY (every public module but the two at the
top that assemble the rest, the proxy and the reqwest adapter) may use only
public modules of the crate, or their own; a `pub use`
that re-exports a private item is allowed (it makes the item public).

With `--with-comments`, paths inside comments (doc links) count too, but
only as spelt: a link through a re-export (`crate::RefusalGuardLayer`)
names the public API, not a module, and does not count.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = ["src", "proxy/src", "testkit/src"]
SRC = ROOT / "src"
# Cycles and public-rule violations still to untangle, printed on every run
# but not failing: folder cycles as "folder: a <-> b", violations as
# "public src -> target".
KNOWN = set()
# Per crate: the public modules that may use public modules only (the
# library's every public module but the reqwest adapter, which assembles the
# rest; the proxy's and the testkit's public modules).
PUBLIC_ONLY_BY_CRATE = {
    "src": [
        "recovery", "store", "telemetry", "text", "sse", "refusal", "header", "env",
        "replay", "api_error", "routing", "tenant",
    ],
    "proxy/src": ["otlp"],
    "testkit/src": ["contract"],
}
PUBLIC_ONLY = PUBLIC_ONLY_BY_CRATE["src"]

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
USE = re.compile(r"\b(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]+);")
PATH = re.compile(rf"(?<![\w:.$])({IDENT})((?:\s*::\s*{IDENT})+)")
CHILD = re.compile(rf"\b(pub(?:\s*\([^)]*\))?\s+)?mod\s+({IDENT})\s*;")
TESTS = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+" + IDENT + r"\s*\{")
DEFINES = r"\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+{0}\b|macro_rules!\s*{0}\b"


def lex(text):
    """(code, comments): the source with comments and string literals blanked
    out, and the text of its comments alone (newlines kept in both)."""
    code, notes, i, n = [], [], 0, len(text)

    def blank(chunk):
        return re.sub(r"[^\n]", " ", chunk)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            code.append(blank(text[i:end]))
            notes.append(text[i:end])
            i = end
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            code.append(blank(text[i:j]))
            notes.append(text[i:j])
            i = j
        elif (raw := re.match(r'b?r(#*)"', text[i:])) and not re.match(r"\w", text[i - 1 : i] or " "):
            close = '"' + raw.group(1)
            end = text.find(close, i + raw.end())
            end = n if end < 0 else end + len(close)
            code.append(blank(text[i:end]))
            notes.append(blank(text[i:end]))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            code.append(blank(text[i : j + 1]))
            notes.append(blank(text[i : j + 1]))
            i = j + 1
        elif c == "'" and (char := re.match(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:])):
            code.append(blank(char.group(0)))
            notes.append(blank(char.group(0)))
            i += char.end()
        else:
            code.append(c)
            notes.append(c if c == "\n" else " ")
            i += 1
    return "".join(code), "".join(notes)


def test_blocks(code):
    """The spans of the code's inline `#[cfg(test)] mod .. { .. }` blocks."""
    spans, start = [], 0
    while match := TESTS.search(code, start):
        depth, i = 0, match.end() - 1
        while i < len(code):
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
            if depth == 0:
                break
        spans.append((match.start(), i))
        start = i
    return spans


def blanked(text, spans):
    for start, end in spans:
        text = text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]
    return text


def expand(tree):
    """`a::{b, c::{d, e as f}}` -> [([a, b], b), ([a, c, d], d), ([a, c, e], f)]."""
    tree = re.sub(r"\s+", " ", tree).strip()
    out = []

    def walk(prefix, part):
        part = part.strip()
        brace = part.find("{")
        if brace < 0:
            name, _, alias = part.partition(" as ")
            names = prefix + [p.strip() for p in name.split("::") if p.strip()]
            if names and names[-1] == "self":
                names = names[:-1]
            if names:
                out.append((names, alias.strip() or names[-1]))
            return
        head = prefix + [p.strip() for p in part[:brace].split("::") if p.strip()]
        depth, cur = 0, ""
        for ch in part[brace + 1 : part.rfind("}")] + ",":
            if ch == "," and depth == 0:
                if cur.strip():
                    walk(head, cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch

    walk([], tree)
    return out


class Crate:
    def __init__(self):
        self.mods = {}
        for path in sorted(SRC.rglob("*.rs")):
            rel = path.relative_to(SRC).with_suffix("").parts
            if rel == ("main",):
                continue
            if rel[-1] in ("mod", "lib"):
                rel = rel[:-1]
            self.mods[tuple(rel)] = path
        self.code, self.notes = {}, {}
        for mod, path in self.mods.items():
            code, notes = lex(path.read_text(encoding="utf-8"))
            spans = test_blocks(code)
            self.code[mod], self.notes[mod] = blanked(code, spans), blanked(notes, spans)
        self.children, self.public_children = {}, {}
        for mod in self.mods:
            found = [(m.group(2), bool(m.group(1) and "(" not in m.group(1))) for m in CHILD.finditer(self.code[mod])]
            self.children[mod] = {name for name, _ in found if mod + (name,) in self.mods}
            self.public_children[mod] = {name for name, public in found if public}
        # Every `use`: (module, name) -> the absolute path it stands for.
        self.aliases, self.globs, self.uses = {}, {m: [] for m in self.mods}, {m: [] for m in self.mods}
        self.public_aliases, self.public_globs = set(), set()
        self.written = {}
        for mod in self.mods:
            for match in USE.finditer(self.code[mod]):
                for names, alias in expand(match.group(2)):
                    if names[-1] != "*":
                        self.written[(mod, alias)] = names
        for mod in self.mods:
            for match in USE.finditer(self.code[mod]):
                public = bool(match.group(1)) and "(" not in match.group(1)
                for names, alias in expand(match.group(2)):
                    target = self.absolute(mod, names)
                    if target is None:
                        continue
                    self.uses[mod].append((target, public))
                    if names[-1] == "*":
                        self.globs[mod].append(target[:-1])
                        if public:
                            self.public_globs.add(mod)
                    else:
                        self.aliases[(mod, alias)] = target
                        if public:
                            self.public_aliases.add((mod, alias))

    def absolute(self, mod, names, depth=0):
        """A path as written in `mod`, from the crate root (None: another crate's)."""
        here, rest = list(mod), list(names)
        written = self.written.get((mod, rest[0]))
        if rest[0] not in ("crate", "self", "super") and rest[0] not in self.children[mod] and written and depth < 32:
            # A name the module imported: the path it was imported by.
            if written == rest[:1]:
                return None
            target = self.absolute(mod, written, depth + 1)
            return target + rest[1:] if target is not None else None
        if rest[0] == "crate":
            return rest[1:]
        if rest[0] == "self":
            return here + rest[1:]
        if rest[0] == "super":
            while rest and rest[0] == "super":
                here, rest = here[:-1], rest[1:]
            return here + rest
        if rest[0] in self.children[mod]:
            return here + rest
        return None

    def defines(self, mod, name):
        return (mod, name) in self.aliases or mod + (name,) in self.mods or re.search(DEFINES.format(re.escape(name)), self.code[mod])

    def resolve(self, path, through_uses=True):
        """The deepest module a crate path lands in."""
        return self.landing(path, through_uses)[0]

    def landing(self, path, through_uses=True, depth=0):
        """(the deepest module a crate path lands in, whether the whole path names it)."""
        cur = ()
        for i, seg in enumerate(path):
            if seg == "*":
                return cur, False
            if cur + (seg,) in self.mods:
                cur += (seg,)
                continue
            if through_uses and depth < 32:
                if (cur, seg) in self.aliases:
                    return self.landing(self.aliases[(cur, seg)] + list(path[i + 1 :]), True, depth + 1)
                for glob in self.globs[cur]:
                    target = self.resolve(glob)
                    if target != cur and self.defines(target, seg):
                        return self.landing(list(target) + list(path[i:]), True, depth + 1)
            return cur, False
        return cur, True

    def private_on_path(self, path, public, depth=0):
        """The first private module a crate path goes through before it
        reaches a public item (None: the path names a public item)."""
        cur = ()
        for i, seg in enumerate(path):
            if cur + (seg,) in self.mods:
                cur += (seg,)
                if cur not in public:
                    return cur
                continue
            if (cur, seg) in self.public_aliases or cur in self.public_globs or depth >= 32:
                return None
            if (cur, seg) in self.aliases:
                return self.private_on_path(self.aliases[(cur, seg)] + list(path[i + 1 :]), public, depth + 1)
            return None
        return None

    def paths(self, mod, text):
        """Every crate path `text` names, as written."""
        found = []
        for match in PATH.finditer(text):
            names = [match.group(1)] + [p.strip() for p in match.group(2).split("::")[1:]]
            if names[0] in ("crate", "self", "super") or names[0] in self.children[mod] or (mod, names[0]) in self.written:
                found.append(names)
        return found

    def references(self, with_comments):
        """module -> [(crate path it names, kind)], a kind being "use", "pub use" or "comment"."""
        refs = {m: [] for m in self.mods}
        for mod in self.mods:
            for target, public in self.uses[mod]:
                refs[mod].append((target, "pub use" if public else "use"))
            inline = USE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), self.code[mod])
            for names in self.paths(mod, inline):
                refs[mod].append((self.absolute(mod, names), "use"))
            if with_comments:
                for names in self.paths(mod, self.notes[mod]):
                    refs[mod].append((self.absolute(mod, names), "comment"))
            refs[mod] = [(path, kind) for path, kind in refs[mod] if path is not None]
        return refs

    def edges(self, refs):
        """module -> {modules it depends on}; comments are read as spelt, not through uses."""
        edges = {m: set() for m in self.mods}
        for mod, found in refs.items():
            for path, kind in found:
                target = self.resolve(path, through_uses=kind != "comment")
                if target != mod and mod[: len(target)] != target:
                    edges[mod].add(target)
        return edges

    def public(self):
        """Modules a user can name: `pub mod` all the way down, or re-exported."""
        public = {()}
        changed = True
        while changed:
            changed = False
            for mod in sorted(public):
                for name in self.public_children.get(mod, ()):
                    if mod + (name,) in self.mods and mod + (name,) not in public:
                        public.add(mod + (name,))
                        changed = True
                for target, is_pub in self.uses[mod]:
                    found, whole = self.landing(target)
                    if is_pub and whole and found not in public:
                        public.add(found)
                        changed = True
        return public


def cycles(nodes, edges):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(n):
        index[n] = low[n] = counter[0]
        counter[0] += 1
        stack.append(n)
        on.add(n)
        for m in sorted(edges[n]):
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in on:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            comp = []
            while True:
                top = stack.pop()
                on.discard(top)
                comp.append(top)
                if top == n:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return out


def order(nodes, edges):
    done, result = set(), []

    def visit(n):
        if n in done:
            return
        done.add(n)
        for m in sorted(edges[n]):
            visit(m)
        result.append(n)

    for n in sorted(nodes):
        visit(n)
    return result


def name(mod):
    return "/".join(mod) or "src"


def main():
    global SRC, PUBLIC_ONLY
    folders = [a for a in sys.argv[1:] if not a.startswith("--")] or CRATES
    failed = 0
    for folder in folders:
        SRC = ROOT / folder
        PUBLIC_ONLY = PUBLIC_ONLY_BY_CRATE.get(folder, [])
        print(f"module-graph: {folder}/")
        failed |= check_crate()
    return failed


def check_crate():
    crate = Crate()
    refs = crate.references(with_comments="--with-comments" in sys.argv[1:])
    edges = crate.edges(refs)
    failed, seen_known = False, set()
    folders = sorted({m[:i] for m in crate.mods for i in range(len(m))})
    for folder in folders:
        depth = len(folder)
        kids = sorted({m[: depth + 1] for m in crate.mods if len(m) > depth and m[:depth] == folder})
        graph, why = {k: set() for k in kids}, {}
        for src, targets in edges.items():
            if len(src) <= depth or src[:depth] != folder:
                continue
            for target in targets:
                if len(target) <= depth or target[:depth] != folder:
                    continue
                a, b = src[: depth + 1], target[: depth + 1]
                if a != b:
                    graph[a].add(b)
                    why.setdefault((a, b), []).append((src, target))
        for comp in cycles(kids, graph):
            line = f"{name(folder)}: " + " <-> ".join(k[-1] for k in comp)
            if line in KNOWN:
                seen_known.add(line)
                print(f"module-graph: KNOWN CYCLE, to untangle, in {line}")
                continue
            failed = True
            print(f"module-graph: cycle in {line}")
            for a in comp:
                for b in comp:
                    for src, target in sorted(why.get((a, b), [])):
                        print(f"    {name(src)} -> {name(target)}")
        if len(kids) > 1:
            print(f"  {name(folder)}/: " + " < ".join(k[-1] for k in order(kids, graph)))
    public = crate.public()
    for src in sorted(refs):
        if not src or src[0] not in PUBLIC_ONLY:
            continue
        private = set()
        for path, kind in refs[src]:
            if kind == "pub use":
                continue
            found = crate.private_on_path(path, public)
            if found and found[:1] != src[:1]:
                private.add(found)
        for target in sorted(private):
            line = f"public {name(src)} -> {name(target)}"
            if line in KNOWN:
                seen_known.add(line)
                print(f"module-graph: KNOWN, to untangle: {line} (private)")
                continue
            failed = True
            print(f"module-graph: public module {name(src)} uses private {name(target)}")
    for line in sorted(KNOWN - seen_known):
        failed = True
        print(f"module-graph: KNOWN lists what is gone, remove it: {line}")
    if not failed:
        print(
            f"module-graph: no cycle in any folder of {SRC.relative_to(ROOT)}/, public modules use public modules only"
            + (f" (but for the {len(KNOWN)} KNOWN above)" if KNOWN else "")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
