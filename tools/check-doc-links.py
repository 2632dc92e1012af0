#!/usr/bin/env python3
"""Every relative link and anchor in the repository's Markdown resolves.

    check-doc-links.py [ROOT]

Reads every tracked *.md file (git ls-files) and checks each relative link:
the file it names exists, and the anchor after `#`, if any, is a heading (or
an explicit `{#id}` / `<a id=…>`) of that file. Links are resolved from the
Markdown file's own folder, as a reader browsing the repository follows them;
the book (docs/, mdBook) keeps the same links, so a link that resolves here
resolves in the book for pages inside docs/. Absolute URLs are not fetched:
the tests run offline. A page of the book over PAGE_LIMIT bytes is an error
too, so no page grows back into a notebook.

Exits 1 naming every broken link as FILE:LINE: target (why).
"""

import re
import subprocess
import sys
from pathlib import Path

PAGE_LIMIT = 25 * 1024
README_LIMIT = 12 * 1024

LINK = re.compile(r"(?<!\!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_LINK = re.compile(r"""<(?:a|img)\s[^>]*(?:href|src)=["']([^"']+)["']""")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ID = re.compile(r"\{#([A-Za-z0-9_.:-]+)\}")
HTML_ID = re.compile(r"""<a\s[^>]*(?:id|name)=["']([^"']+)["']""")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")


def slug(text: str) -> str:
    """The anchor mdBook and GitHub give a heading (they agree on ASCII)."""
    text = EXPLICIT_ID.sub("", text)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.replace("`", "").strip().lower()
    kept = "".join(c for c in text if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def lines_outside_fences(text: str):
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def anchors(path: Path) -> set:
    found, seen = set(), {}
    for _, line in lines_outside_fences(path.read_text(encoding="utf-8")):
        found.update(HTML_ID.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        explicit = EXPLICIT_ID.search(heading.group(2))
        if explicit:
            found.add(explicit.group(1))
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path):
    for number, line in lines_outside_fences(path.read_text(encoding="utf-8")):
        stripped = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        for pattern in (LINK, IMAGE, HTML_LINK):
            for target in pattern.findall(stripped):
                yield number, target
        definition = REF_DEF.match(stripped)
        if definition:
            yield number, definition.group(1)


def check_link(root: Path, source: Path, target: str, cache: dict):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
        return None  # http:, https:, mailto: — not fetched offline
    file_part, _, anchor = target.partition("#")
    resolved = (source.parent / file_part).resolve() if file_part else source
    try:
        resolved.relative_to(root)
    except ValueError:
        return "points outside the repository"
    if not resolved.exists():
        return "no such file"
    if anchor and resolved.suffix == ".md":
        if resolved not in cache:
            cache[resolved] = anchors(resolved)
        if anchor not in cache[resolved]:
            return f"no heading with anchor #{anchor}"
    return None


def tracked_markdown(root: Path):
    out = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.md"],
        cwd=root, check=True, capture_output=True, text=True,
    ).stdout
    return [root / name for name in out.split("\n") if name and (root / name).exists()]


def size_errors(root: Path, files) -> list:
    errors = []
    for path in files:
        rel = path.relative_to(root)
        size = path.stat().st_size
        if rel.parts[0] == "docs" and size > PAGE_LIMIT:
            errors.append(f"{rel}: {size} bytes, over the book's page limit of {PAGE_LIMIT}")
        if str(rel) == "README.md" and size > README_LIMIT:
            errors.append(f"{rel}: {size} bytes, over the README's limit of {README_LIMIT}")
    return errors


def main(argv) -> int:
    root = Path(argv[1] if len(argv) > 1 else ".").resolve()
    files = tracked_markdown(root)
    errors, cache = size_errors(root, files), {}
    for path in files:
        for number, target in links(path):
            why = check_link(root, path, target, cache)
            if why:
                errors.append(f"{path.relative_to(root)}:{number}: {target} ({why})")
    for error in errors:
        print(error, file=sys.stderr)
    print(f"check-doc-links: {len(files)} Markdown files, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
