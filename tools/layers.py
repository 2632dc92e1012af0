#!/usr/bin/env python3
"""The workspace's shape, checked: crates depend only downwards, and no source
files of a crate reach each other in a loop.

Layers (a crate may depend on the crates listed for it, nothing else of the
workspace):

    core    pure: rules, keys, leases, the wire format
    filter  core                  (the proxy-wasm filter)
    store   core                  (buckets and fleet state: memory, Redis)
    agent   core, store           (the per-node server)
    cli     core, store, agent    (the operator's commands)

Crates outside this list (tests, sim, bench, fuzz checks) are tools on top:
not checked for layering, but for loops like every crate.

A loop is a set of files of one crate that reach each other through paths
(`crate::a::b`, `super::c`, and `use` groups of either): a change to one may
need a change to every other. A file naming its own ancestor or descendant
module does not count (Rust's module tree nests them on purpose), and test
code (`#[cfg(test)]` onwards, `tests.rs`, `tests/` folders) is left out.

    tools/layers.py [ROOT]   exit 0 when both hold, else 1 with one line a problem
"""

import pathlib
import re
import sys
import tomllib

LAYERS = {
    "meshlimit-core": set(),
    "meshlimit-filter": {"meshlimit-core"},
    "meshlimit-store": {"meshlimit-core"},
    "meshlimit-agent": {"meshlimit-core", "meshlimit-store"},
    "meshlimit-cli": {"meshlimit-core", "meshlimit-store", "meshlimit-agent"},
}
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
CRATE_PATH = re.compile(rf"\bcrate((?:::{IDENT})+)")
SUPER_PATH = re.compile(rf"\b((?:super::)+)({IDENT}(?:::{IDENT})*)")
USE_GROUP = re.compile(rf"\buse\s+((?:crate|(?:super::)*super)(?:::{IDENT})*)::\{{([^{{}}]*)\}}")


def members(root):
    """(package name, crate directory) of every workspace member."""
    workspace = tomllib.loads((root / "Cargo.toml").read_text())["workspace"]
    for member in workspace["members"]:
        manifest = tomllib.loads((root / member / "Cargo.toml").read_text())
        yield manifest["package"]["name"], root / member, manifest


def layering_problems(root):
    names = {name for name, _, _ in members(root)}
    problems = []
    for name, _, manifest in members(root):
        if name not in LAYERS:
            continue
        used = set(manifest.get("dependencies", {})) & names
        for dep in sorted(used - LAYERS[name]):
            problems.append(f"layers: {name} depends on {dep}, above or beside it "
                            f"(it may use only {sorted(LAYERS[name]) or 'nothing of the workspace'})")
    return problems


def source_files(src):
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        if "tests" in rel.parts[:-1] or rel.name == "tests.rs":
            continue
        yield path


def module_path(src, path):
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts.pop()
    return tuple(parts)


def code_of(path):
    """The file's text without its tests and comments."""
    text = path.read_text(encoding="utf-8", errors="replace")
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    return re.sub(r"//[^\n]*", "", text)


def absolute(module, prefix):
    """`crate::a::b` or `super::super::c` as a path from the crate root."""
    segments = prefix.split("::")
    if segments[0] == "crate":
        return tuple(segments[1:])
    ups = 0
    while ups < len(segments) and segments[ups] == "super":
        ups += 1
    return module[: max(len(module) - ups, 0)] + tuple(segments[ups:])


def referenced_paths(module, code):
    for m in CRATE_PATH.finditer(code):
        yield tuple(m.group(1).split("::")[1:])
    for m in SUPER_PATH.finditer(code):
        ups = m.group(1).count("super::")
        if ups <= len(module):
            yield module[: len(module) - ups] + tuple(m.group(2).split("::"))
    for m in USE_GROUP.finditer(code):
        base = absolute(module, m.group(1))
        for item in m.group(2).split(","):
            item = item.split(" as ")[0].strip()
            if item and item != "self":
                yield base + tuple(item.split("::"))


def file_graph(src):
    files = list(source_files(src))
    by_module = {}
    for path in sorted(files, key=lambda p: p.name == "main.rs"):  # lib.rs is the root
        by_module.setdefault(module_path(src, path), path)
    graph = {}
    for path in files:
        module = module_path(src, path)
        targets = set()
        for ref in referenced_paths(module, code_of(path)):
            # The longest prefix of the path that is a module with a file.
            owner = next((ref[:n] for n in range(len(ref), -1, -1) if ref[:n] in by_module), ())
            nested = owner[: len(module)] == module or module[: len(owner)] == owner
            if not nested:
                targets.add(by_module[owner])
        graph[path] = targets
    return graph


def loops(graph):
    """The strongly connected sets of two or more files (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(graph[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, edges = work[-1]
            advanced = False
            for w in edges:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def loop_problems(root):
    problems = []
    for name, crate_dir, _ in members(root):
        if not (crate_dir / "src").is_dir():
            continue
        for component in loops(file_graph(crate_dir / "src")):
            files = ", ".join(str(p.relative_to(root)) for p in component)
            problems.append(f"loop: {len(component)} files of {name} reach each other: {files}")
    return problems


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    problems = layering_problems(root) + loop_problems(root)
    for p in problems:
        print(p)
    if not problems:
        print(f"layers: ok ({', '.join(LAYERS)}), no import loop in any crate")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
