"""Package the filter's .wasm as an OCI image layout an Istio WasmPlugin can pull.

Istio's "compat" Wasm image variant, the one Istio's own docs build with
`docker build` (FROM scratch; COPY plugin.wasm): an OCI image manifest with one
application/vnd.oci.image.layer.v1.tar+gzip layer holding `plugin.wasm`, the
annotation module.wasm.image/variant=compat, and a standard image config.
(Istio's fetcher accepts the other, "oci" variant only with exactly two layers.)

    wasm_oci.py pack MODULE.wasm OUT_DIR [--tag 0.1.0]   # prints the manifest digest
    wasm_oci.py verify OUT_DIR [--wasm MODULE.wasm]

Deterministic: the same module gives the same digests (fixed tar metadata, gzip
without timestamp, canonical JSON). Push the manifest by its tag, e.g.
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
WASM_MAGIC = b"\0asm"


class LayoutError(Exception):
    """The layout is not a consistent compat Wasm image."""


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(module):
    """An uncompressed tar with one entry, plugin.wasm, and no varying metadata."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo("plugin.wasm")
        info.size, info.mode, info.mtime = len(module), 0o444, 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(module))
    return buf.getvalue()


def pack(module, out, tag):
    """Writes the layout to `out` (replacing an earlier one); returns the manifest digest."""
    if not module.startswith(WASM_MAGIC):
        raise LayoutError("not a WebAssembly module (no \\0asm magic)")
    tar = layer_tar(module)
    layer = gzip.compress(tar, compresslevel=9, mtime=0)
    config = canonical({
        "architecture": "wasm", "os": "wasip1", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [sha256(tar)]},
    })
    manifest = canonical({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": sha256(config), "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": sha256(layer), "size": len(layer)}],
        "annotations": dict(COMPAT, **{"org.opencontainers.image.title": "meshlimit-filter"}),
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


def plugin_wasm(tar_bytes):
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        names = tar.getnames()
        if names != ["plugin.wasm"]:
            raise LayoutError(f"layer holds {names}, want exactly ['plugin.wasm']")
        return tar.extractfile("plugin.wasm").read()


def verify(layout, module=None):
    """Checks index -> manifest -> config and layer; returns the manifest digest."""
    if json.loads((layout / "oci-layout").read_bytes()).get("imageLayoutVersion") != "1.0.0":
        raise LayoutError("oci-layout: imageLayoutVersion is not 1.0.0")
    index = json.loads((layout / "index.json").read_bytes())
    if index.get("schemaVersion") != 2 or len(index.get("manifests", [])) != 1:
        raise LayoutError("index.json: want schemaVersion 2 and exactly one manifest")
    desc = index["manifests"][0]
    manifest = json.loads(read_blob(layout, desc, MANIFEST))
    if manifest.get("mediaType") != MANIFEST or manifest.get("schemaVersion") != 2:
        raise LayoutError("manifest: want an OCI image manifest, schemaVersion 2")
    if manifest.get("annotations", {}).get("module.wasm.image/variant") != "compat":
        raise LayoutError("manifest: missing annotation module.wasm.image/variant=compat")
    config = json.loads(read_blob(layout, manifest["config"], CONFIG))
    if len(manifest.get("layers", [])) != 1:
        raise LayoutError("manifest: the compat variant has exactly one layer")
    tar = gzip.decompress(read_blob(layout, manifest["layers"][0], LAYER))
    if config.get("rootfs", {}).get("diff_ids") != [sha256(tar)]:
        raise LayoutError("config: rootfs.diff_ids does not match the uncompressed layer")
    wasm = plugin_wasm(tar)
    if not wasm.startswith(WASM_MAGIC):
        raise LayoutError("plugin.wasm is not a WebAssembly module")
    if module is not None and wasm != module:
        raise LayoutError("plugin.wasm differs from the module given")
    referenced = {desc["digest"], manifest["config"]["digest"], manifest["layers"][0]["digest"]}
    present = {"sha256:" + p.name for p in (layout / "blobs" / "sha256").iterdir()}
    if present != referenced:
        raise LayoutError(f"unreferenced or missing blobs: {sorted(present ^ referenced)}")
    return desc["digest"]


def workspace_version():
    cargo = pathlib.Path(__file__).resolve().parents[2] / "Cargo.toml"
    return tomllib.loads(cargo.read_text())["workspace"]["package"]["version"]


SHA256_LINE = re.compile(r"^(\s*sha256:)\s*\S*.*$", re.M)


def pin(plugin, digest):
    """Writes `digest` (sha256:HEX or HEX) as the `sha256:` of a WasmPlugin file,
    keeping everything else as written. Returns the hex written."""
    hexdigest = digest.removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{64}", hexdigest):
        raise ValueError(f"{digest!r} is not a sha256 digest")
    text = plugin.read_text()
    if len(SHA256_LINE.findall(text)) != 1:
        raise ValueError(f"{plugin}: want exactly one `sha256:` line to fill")
    plugin.write_text(SHA256_LINE.sub(lambda m: f"{m.group(1)} {hexdigest}", text))
    return hexdigest


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("wasm", type=pathlib.Path)
    p.add_argument("out", type=pathlib.Path)
    p.add_argument("--tag", default=None, help="default: the workspace version in Cargo.toml")
    v = sub.add_parser("verify")
    v.add_argument("out", type=pathlib.Path)
    v.add_argument("--wasm", type=pathlib.Path)
    n = sub.add_parser("pin", help="write OUT_DIR's manifest digest into a WasmPlugin's sha256")
    n.add_argument("out", type=pathlib.Path)
    n.add_argument("plugin", type=pathlib.Path, nargs="+")
    args = ap.parse_args()
    try:
        if args.cmd == "pack":
            tag = args.tag or workspace_version()
            digest = pack(args.wasm.read_bytes(), args.out, tag)
            print(f"{args.out} ({tag}): manifest {digest}")
        elif args.cmd == "pin":
            digest = verify(args.out, None)
            for plugin in args.plugin:
                print(f"{plugin}: sha256 {pin(plugin, digest)}")
        else:
            module = args.wasm.read_bytes() if args.wasm else None
            print(f"ok   {args.out}: index, manifest, config and layer consistent; manifest {verify(args.out, module)}")
    except (LayoutError, OSError, ValueError, KeyError) as e:
        print(f"FAIL {args.out}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
