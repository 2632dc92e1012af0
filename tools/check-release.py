#!/usr/bin/env python3
"""The version of the newest release agrees everywhere a user reads it.

    check-release.py [ROOT]

The workspace version (Cargo.toml, `[workspace.package]`) must be the newest
release heading of CHANGELOG.md (`## [X.Y.Z] - YYYY-MM-DD`), and every
image of the project's in deploy/ (named `…/meshlimit/NAME`: the DaemonSet's
image, the WasmPlugin's url, the overlays' `newTag`) must carry it as its tag. Exits 1 naming each mismatch.
"""

import re
import sys
from pathlib import Path

RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", re.M)
# Every image the project builds is pushed under a `meshlimit/` repository.
IMAGE_TAG = re.compile(r"/meshlimit/[a-z0-9-]+:([^\s@\"']+)")
NEW_TAG = re.compile(r"- name:\s*\S*/meshlimit/[a-z0-9-]+\s*\n\s*newTag:\s*(\S+)")


def workspace_version(root: Path) -> str:
    text = (root / "Cargo.toml").read_text(encoding="utf-8")
    section = text.split("[workspace.package]", 1)[1].split("\n[", 1)[0]
    return re.search(r'^version\s*=\s*"([^"]+)"', section, re.M).group(1)


def problems(root: Path) -> list:
    version = workspace_version(root)
    errors = []
    releases = RELEASE.findall((root / "CHANGELOG.md").read_text(encoding="utf-8"))
    if not releases or releases[0] != version:
        newest = releases[0] if releases else "none"
        errors.append(f"CHANGELOG.md: newest release is {newest}, the crates are {version}")
    for path in sorted((root / "deploy").rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        for tag in IMAGE_TAG.findall(text) + NEW_TAG.findall(text):
            if tag != version:
                errors.append(f"{path.relative_to(root)}: image tag {tag}, the crates are {version}")
    return errors


def main(argv) -> int:
    root = Path(argv[1] if len(argv) > 1 else ".")
    errors = problems(root)
    for error in errors:
        print(error, file=sys.stderr)
    print(f"check-release: version {workspace_version(root)}, {len(errors)} problems")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
