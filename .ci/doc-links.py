#!/usr/bin/env python3
"""Checks the relative links of README.md, CHANGELOG.md and docs/*.md: each
linked file exists, and each #anchor names a heading of its page (GitHub's
slugs: lower case, punctuation dropped, spaces as dashes, repeats suffixed
-1, -2, ...). Web links are not fetched. Exits 1 naming every broken link."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
pages = [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").glob("*.md"))]


def prose(path):
    """The lines of a page outside fenced code blocks, numbered."""
    fence = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            yield number, line


def anchors(path):
    seen, found = {}, set()
    for _, line in prose(path):
        heading = re.match(r"#{1,6} (.*)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(f"{slug}-{count}" if count else slug)
    return found


broken = []
for page in pages:
    if not page.exists():
        continue
    for number, line in prose(page):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (page.parent / file).resolve() if file else page
            where = f"{page.relative_to(root)}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where}: no heading of that name")

for line in broken:
    print(line)
if broken:
    sys.exit(1)
print(f"doc links: {len(pages)} pages, every relative link resolves")
