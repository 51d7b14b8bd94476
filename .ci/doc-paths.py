#!/usr/bin/env python3
"""Fails when prose names a file, folder or module that does not exist.

Read: the README, every crate's README, docs/*.md, and the comments (`//`,
`//!`, `///`) of every Rust file under src/, proxy/, testkit/, tests/,
benches/ and tools/. CHANGELOG.md is history and names what was, so it is
left out.

Checked, inside backticks or as a markdown link target:
- a path with a slash and a known file ending (`src/guard/mod.rs`,
  `docs/proxy.md`, `.ci/run`) or ending in a slash (`dialect/`), whose
  first folder is one of this repository's (paths cited from other
  repositories, such as an SDK's `types/...`, are not checked): it must
  exist relative to the repository's root, to a crate's `src/`, to a
  folder holding the file that names it, or (for a Rust file) to its crate's
  `src/` folders by suffix (`guard/hold.rs` inside src/);
- a module path of one of the workspace's crates
  (`refusal_guard::recovery::category`, `refusal_guard_proxy::otlp`,
  `crate::guard::hold` in a Rust file): each segment that looks like a
  module (lower case) must be a module file or folder of that crate, or an
  item defined in its parent (`fn`, `const`, ...), followed through
  `pub use` re-exports by name.

Intra-doc links are rustdoc's to check (`cargo doc -D warnings`); this
catches what no tool resolves: names in plain backticks and prose. Exits 1
naming every broken one, with its file and line.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CRATES = {
    "refusal_guard": ROOT / "src",
    "refusal_guard_proxy": ROOT / "proxy" / "src",
    "refusal_guard_testkit": ROOT / "testkit" / "src",
}
ENDINGS = (".rs", ".md", ".py", ".sh", ".toml", ".html", ".yaml", ".yml", ".json", ".jsonl",
           ".txt", ".bin", ".csv", ".lock")
SKIP_DIRS = {"target", ".git", ".venv", "node_modules", "fixtures", "corpus"}
TICK = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
PATHLIKE = re.compile(r"^\.?[\w.-]+(?:/[\w.*{}-]*)+$")
MODPATH = re.compile(r"^(refusal_guard(?:_proxy|_testkit)?|crate)((?:::\w+)+)")


def pages():
    yield ROOT / "README.md"
    for crate in ("proxy", "testkit"):
        if (ROOT / crate / "README.md").exists():
            yield ROOT / crate / "README.md"
    yield from sorted((ROOT / "docs").glob("*.md"))


def rust_files():
    for top in ("src", "proxy", "testkit", "tests", "benches", "tools"):
        for path in sorted((ROOT / top).rglob("*.rs")):
            if not SKIP_DIRS.intersection(path.relative_to(ROOT).parts):
                yield path


def markdown_prose(path):
    fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            yield number, line


def rust_comments(path):
    """Comment lines of a Rust file, code blocks inside doc comments left out."""
    fence = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        match = re.match(r"//[/!]?\s?(.*)", stripped)
        if not match:
            continue
        text = match.group(1)
        if text.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            yield number, text


def crate_src(path):
    for src in CRATES.values():
        if src == path or src in path.parents:
            return src
    return None


def path_exists(token, where):
    token = token.rstrip("/").split("#")[0]
    if any(c in token for c in "*{}") or token.startswith("http") or "..." in token:
        return True
    bases = [ROOT, *where.parents, *CRATES.values()]
    for base in bases:
        if (base / token).exists():
            return True
    src = crate_src(where)
    # A path inside a crate's src/ may be named from any folder of it
    # (`guard/hold.rs`, `request/original.rs` in the guard's docs).
    for base in ([src] if src else list(CRATES.values())):
        for found in base.rglob(pathlib.PurePath(token).name):
            if found.as_posix().endswith("/" + token) or found.as_posix().endswith(token):
                return True
    return False


def our_folders():
    """The names a path of ours may start with: the repository's top-level
    entries, and every folder inside a crate's `src/` (`guard/`)."""
    names = {p.name for p in ROOT.iterdir()}
    for src in CRATES.values():
        names |= {p.name for p in src.rglob("*") if p.is_dir()}
    return names


OURS = our_folders()


def is_path(token):
    if not PATHLIKE.match(token) or "/" not in token or "://" in token:
        return False
    # Paths in other repositories (an SDK's `types/...py`) are cited, not ours.
    if token.split("/")[0] not in OURS:
        return False
    if token.startswith(("/", "~", "$", "-")) or token.count("/") > 8:
        return False
    # Wire paths (`/v1/messages`, `models/x:generateContent`) are not files.
    head = token.split("/")[0]
    if head in {"v1", "v1beta", "models", "projects", "openai", "application", "text", "model"}:
        return False
    return token.endswith(ENDINGS) or token.endswith("/")


class Modules:
    """Module files and the items each defines, per crate."""

    def __init__(self):
        self.items, self.reexports = {}, {}
        for crate, src in CRATES.items():
            for path in src.rglob("*.rs"):
                parts = list(path.relative_to(src).with_suffix("").parts)
                if parts[-1] in ("mod", "lib", "main"):
                    parts = parts[:-1]
                key = (crate, *parts)
                text = path.read_text(encoding="utf-8")
                self.items[key] = set(re.findall(
                    r"\b(?:fn|struct|enum|trait|type|const|static|mod|macro_rules!)\s+(\w+)", text))
                self.items[key] |= set(re.findall(r"^\s*(\w+)\s*[,{(]", text, re.M))
                names = set()
                for use in re.findall(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
                    names |= set(re.findall(r"\b(\w+)\b", use))
                self.reexports[key] = names

    def exists(self, crate, segments, where):
        if crate == "crate":
            src = crate_src(where)
            if src is None:
                return True
            crate = next(name for name, path in CRATES.items() if path == src)
        key = (crate,)
        for segment in segments:
            if (*key, segment) in self.items:
                key = (*key, segment)
                continue
            known = self.items.get(key, set()) | self.reexports.get(key, set())
            return segment in known or not segment[:1].islower()
        return True


def main():
    modules = Modules()
    broken = []

    def check(where, number, text, rust):
        tokens = TICK.findall(text) + ([] if rust else LINK.findall(text))
        for token in tokens:
            token = token.strip()
            if is_path(token) and not path_exists(token, where):
                broken.append(f"{where.relative_to(ROOT)}:{number}: no such path: {token}")
                continue
            match = MODPATH.match(token)
            if match:
                segments = [s for s in match.group(2).split("::") if s]
                if not modules.exists(match.group(1), segments, where):
                    broken.append(f"{where.relative_to(ROOT)}:{number}: no such module or item: {token}")

    for page in pages():
        for number, line in markdown_prose(page):
            check(page, number, line, rust=False)
    for path in rust_files():
        for number, text in rust_comments(path):
            check(path, number, text, rust=True)
    for line in broken:
        print(f"doc-paths: {line}")
    if broken:
        print(f"doc-paths: {len(broken)} names in prose point to nothing")
        return 1
    print("doc-paths: every file, folder and module the prose names exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
