"""Package meshlimit's two images as OCI image layouts, offline and deterministically.

- filter: the filter's .wasm as Istio's "compat" Wasm image variant, the one
  Istio's own docs build with `docker build` (FROM scratch; COPY plugin.wasm):
  one application/vnd.oci.image.layer.v1.tar+gzip layer holding `plugin.wasm`,
  the annotation module.wasm.image/variant=compat, and a standard image config.
  (Istio's fetcher accepts the other, "oci" variant only with exactly two layers.)
- agent: the agent as a static (musl) Linux binary on an empty base: one layer
  holding /usr/local/bin/meshlimit-agent, run as the unprivileged user 65532,
  with the DaemonSet's arguments as its default command.

    oci.py pack {filter,agent} FILE OUT_DIR [--tag 0.1.0]   # prints the manifest digest
    oci.py verify OUT_DIR [--file FILE]
    oci.py pin OUT_DIR MANIFEST...      # writes the digest into deploy manifests
    oci.py pinned MANIFEST              # prints the digest a manifest pins

Deterministic: the same file gives the same digests (fixed tar metadata, gzip
without timestamp, canonical JSON), so a digest names its content. Push by tag:
    skopeo copy oci:OUT_DIR:0.1.0 docker://REGISTRY/meshlimit-filter:0.1.0
"""

import argparse
import gzip
import hashlib
import io
import json
import pathlib
import re
import shutil
import sys
import tarfile
import tomllib

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
COMPAT = {"module.wasm.image/variant": "compat"}
TITLE = "org.opencontainers.image.title"
WASM_MAGIC = b"\0asm"
ELF_MAGIC = b"\x7fELF"
AGENT_PATH = "usr/local/bin/meshlimit-agent"
# The user the DaemonSet runs as (runAsUser/runAsGroup): no root, no shell.
AGENT_USER = "65532:65532"
AGENT_CMD = ["run", "--rules", "/etc/meshlimit/rules/rules.yaml", "--listen", "0.0.0.0:8081"]


class LayoutError(Exception):
    """The layout is not a consistent meshlimit image."""


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(entries):
    """An uncompressed tar of (path, mode, bytes or None for a directory) with
    no varying metadata: owner root, time zero, no user or group names."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path, mode, data in entries:
            info = tarfile.TarInfo(path)
            info.mode, info.mtime, info.uid, info.gid = mode, 0, 0, 0
            info.uname = info.gname = ""
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Kind:
    """What differs between the two images: the file, its place, the config."""

    def __init__(self, name, magic, entries, platform, config, annotations):
        self.name, self.magic, self.entries = name, magic, entries
        self.platform, self.config, self.annotations = platform, config, annotations

    def file_in(self, tar_bytes):
        """The one regular file of the layer, checked to be where this kind keeps it."""
        want = [p for p, _, data in self.entries(b"") if data is not None]
        with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
            files = [m.name for m in tar.getmembers() if m.isfile()]
            if files != want:
                raise LayoutError(f"layer holds the files {files}, want exactly {want}")
            return tar.extractfile(want[0]).read()


FILTER = Kind(
    "filter", WASM_MAGIC,
    lambda wasm: [("plugin.wasm", 0o444, wasm)],
    {"architecture": "wasm", "os": "wasip1"},
    {},
    dict(COMPAT, **{TITLE: "meshlimit-filter"}),
)
AGENT = Kind(
    "agent", ELF_MAGIC,
    lambda binary: [("usr/", 0o755, None), ("usr/local/", 0o755, None),
                    ("usr/local/bin/", 0o755, None), (AGENT_PATH, 0o555, binary)],
    {"architecture": "amd64", "os": "linux"},
    {"User": AGENT_USER, "Entrypoint": ["/" + AGENT_PATH], "Cmd": AGENT_CMD,
     "ExposedPorts": {"8081/tcp": {}}},
    {TITLE: "meshlimit-agent"},
)
KINDS = {k.name: k for k in (FILTER, AGENT)}


def pack(kind, content, out, tag):
    """Writes the layout to `out` (replacing an earlier one); returns the manifest digest."""
    if not content.startswith(kind.magic):
        raise LayoutError(f"not a {kind.name} file (no {kind.magic!r} magic)")
    tar = layer_tar(kind.entries(content))
    layer = gzip.compress(tar, compresslevel=9, mtime=0)
    config = canonical(dict(kind.platform, config=kind.config,
                            rootfs={"type": "layers", "diff_ids": [sha256(tar)]}))
    manifest = canonical({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": sha256(config), "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": sha256(layer), "size": len(layer)}],
        "annotations": kind.annotations,
    })
    index = canonical({
        "schemaVersion": 2, "mediaType": INDEX,
        "manifests": [{"mediaType": MANIFEST, "digest": sha256(manifest), "size": len(manifest),
                       "annotations": {"org.opencontainers.image.ref.name": tag}}],
    })
    if out.exists():
        if any(out.iterdir()) and not (out / "oci-layout").exists():
            raise LayoutError(f"{out} exists and is not an OCI layout: not replacing it")
        shutil.rmtree(out)
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for blob in (config, layer, manifest):
        (blobs / sha256(blob).split(":")[1]).write_bytes(blob)
    (out / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))
    (out / "index.json").write_bytes(index)
    return sha256(manifest)


def read_blob(layout, desc, media_type):
    """The blob a descriptor names, after checking its media type, size and digest."""
    if desc.get("mediaType") != media_type:
        raise LayoutError(f"{desc.get('digest')}: media type {desc.get('mediaType')}, want {media_type}")
    algo, _, hexdigest = desc["digest"].partition(":")
    path = layout / "blobs" / algo / hexdigest
    if algo != "sha256" or not path.is_file():
        raise LayoutError(f"{desc['digest']}: no such blob")
    data = path.read_bytes()
    if len(data) != desc["size"]:
        raise LayoutError(f"{desc['digest']}: size {len(data)}, descriptor says {desc['size']}")
    if sha256(data) != desc["digest"]:
        raise LayoutError(f"{desc['digest']}: content hashes to {sha256(data)}")
    return data


def kind_of(manifest):
    title = manifest.get("annotations", {}).get(TITLE)
    for kind in KINDS.values():
        if title == kind.annotations[TITLE]:
            if any(manifest["annotations"].get(k) != v for k, v in kind.annotations.items()):
                raise LayoutError(f"manifest: {kind.name} image without its annotations {kind.annotations}")
            return kind
    raise LayoutError(f"manifest: {TITLE} {title!r} is neither meshlimit image")


def verify(layout, content=None):
    """Checks index -> manifest -> config and layer; returns (kind, manifest digest)."""
    if json.loads((layout / "oci-layout").read_bytes()).get("imageLayoutVersion") != "1.0.0":
        raise LayoutError("oci-layout: imageLayoutVersion is not 1.0.0")
    index = json.loads((layout / "index.json").read_bytes())
    if index.get("schemaVersion") != 2 or len(index.get("manifests", [])) != 1:
        raise LayoutError("index.json: want schemaVersion 2 and exactly one manifest")
    desc = index["manifests"][0]
    manifest = json.loads(read_blob(layout, desc, MANIFEST))
    if manifest.get("mediaType") != MANIFEST or manifest.get("schemaVersion") != 2:
        raise LayoutError("manifest: want an OCI image manifest, schemaVersion 2")
    kind = kind_of(manifest)
    config = json.loads(read_blob(layout, manifest["config"], CONFIG))
    if len(manifest.get("layers", [])) != 1:
        raise LayoutError("manifest: a meshlimit image has exactly one layer")
    tar = gzip.decompress(read_blob(layout, manifest["layers"][0], LAYER))
    if config.get("rootfs", {}).get("diff_ids") != [sha256(tar)]:
        raise LayoutError("config: rootfs.diff_ids does not match the uncompressed layer")
    if config.get("config") != kind.config:
        raise LayoutError(f"config: want {kind.config}, found {config.get('config')}")
    inside = kind.file_in(tar)
    if not inside.startswith(kind.magic):
        raise LayoutError(f"the layer's file is not a {kind.name} file")
    if content is not None and inside != content:
        raise LayoutError("the layer's file differs from the file given")
    referenced = {desc["digest"], manifest["config"]["digest"], manifest["layers"][0]["digest"]}
    present = {"sha256:" + p.name for p in (layout / "blobs" / "sha256").iterdir()}
    if present != referenced:
        raise LayoutError(f"unreferenced or missing blobs: {sorted(present ^ referenced)}")
    return kind, desc["digest"]


def workspace_version():
    cargo = pathlib.Path(__file__).resolve().parents[2] / "Cargo.toml"
    return tomllib.loads(cargo.read_text())["workspace"]["package"]["version"]


# A WasmPlugin pins its module as `sha256: HEX`; a kustomization pins the
# agent's image as the `digest:` of its `images:` entry (kustomize renders
# `NAME:TAG@sha256:HEX`, and the digest wins over the tag).
PINS = {
    FILTER.name: re.compile(r"^(?P<head>\s*sha256:)\s*(?P<hex>\S*).*$", re.M),
    AGENT.name: re.compile(r"^(?P<head>(?P<indent>\s*)- name:\s*\S*/meshlimit-agent\n\s*newTag:\s*\S+)"
                           r"(?:\n\s*digest:\s*sha256:(?P<hex>\S*))?$", re.M),
}


def pin(kind, manifest_file, digest):
    """Writes `digest` (sha256:HEX or HEX) where `manifest_file` pins the image
    of `kind`, keeping everything else as written. Returns the hex written."""
    hexdigest = digest.removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
        raise ValueError(f"{digest!r} is not a sha256 digest")
    text = manifest_file.read_text()
    pattern = PINS[kind.name]
    if len(pattern.findall(text)) != 1:
        raise ValueError(f"{manifest_file}: want exactly one place that pins the {kind.name} image")

    def written(m):
        if kind is FILTER:
            return f"{m.group('head')} {hexdigest}"
        return f"{m.group('head')}\n{m.group('indent')}  digest: sha256:{hexdigest}"

    manifest_file.write_text(pattern.sub(written, text))
    return hexdigest


def pinned(manifest_file):
    """(kind, hex) of the one image `manifest_file` pins; hex is None when unpinned."""
    text = manifest_file.read_text()
    found = [(KINDS[name], m.group("hex")) for name, p in PINS.items() for m in p.finditer(text)]
    if len(found) != 1:
        raise ValueError(f"{manifest_file}: want exactly one pinned meshlimit image, found {len(found)}")
    return found[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("kind", choices=sorted(KINDS))
    p.add_argument("file", type=pathlib.Path)
    p.add_argument("out", type=pathlib.Path)
    p.add_argument("--tag", default=None, help="default: the workspace version in Cargo.toml")
    v = sub.add_parser("verify")
    v.add_argument("out", type=pathlib.Path)
    v.add_argument("--file", type=pathlib.Path)
    n = sub.add_parser("pin", help="write OUT_DIR's manifest digest into deploy manifests")
    n.add_argument("out", type=pathlib.Path)
    n.add_argument("manifests", type=pathlib.Path, nargs="+")
    d = sub.add_parser("pinned", help="print the digest a deploy manifest pins")
    d.add_argument("manifest", type=pathlib.Path)
    args = ap.parse_args()
    try:
        if args.cmd == "pack":
            tag = args.tag or workspace_version()
            digest = pack(KINDS[args.kind], args.file.read_bytes(), args.out, tag)
            print(f"{args.out} ({args.kind} {tag}): manifest {digest}")
        elif args.cmd == "pin":
            kind, digest = verify(args.out)
            for manifest_file in args.manifests:
                print(f"{manifest_file}: {kind.name} sha256:{pin(kind, manifest_file, digest)}")
        elif args.cmd == "pinned":
            kind, hexdigest = pinned(args.manifest)
            print(f"{kind.name} sha256:{hexdigest}")
        else:
            content = args.file.read_bytes() if args.file else None
            kind, digest = verify(args.out, content)
            print(f"ok   {args.out}: {kind.name} image, index, manifest, config and layer consistent; manifest {digest}")
    except (LayoutError, OSError, ValueError, KeyError) as e:
        print(f"FAIL {args.out if hasattr(args, 'out') else args.manifest}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
