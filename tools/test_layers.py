"""tools/layers.py finds what it is for, and nothing else: `python3 -m unittest
discover -s tools -p 'test_layers.py'` (`make lint` runs it)."""

import pathlib
import tempfile
import textwrap
import unittest

import layers


def workspace(tmp, crates):
    """A workspace of `crates`: {package name: (dependencies, {path: source})}."""
    root = pathlib.Path(tmp)
    dirs = []
    for name, (deps, files) in crates.items():
        d = name.removeprefix("meshlimit-")
        dirs.append(d)
        dep_lines = "".join(f'{dep} = {{ path = "../{dep.removeprefix("meshlimit-")}" }}\n' for dep in deps)
        (root / d / "src").mkdir(parents=True)
        (root / d / "Cargo.toml").write_text(f'[package]\nname = "{name}"\n[dependencies]\n{dep_lines}')
        for path, text in files.items():
            (root / d / "src" / path).parent.mkdir(parents=True, exist_ok=True)
            (root / d / "src" / path).write_text(textwrap.dedent(text))
    members = ", ".join(f'"{d}"' for d in dirs)
    (root / "Cargo.toml").write_text(f"[workspace]\nmembers = [{members}]\n")
    return root


class LayersTests(unittest.TestCase):
    def check(self, crates):
        with tempfile.TemporaryDirectory() as tmp:
            root = workspace(tmp, crates)
            return layers.layering_problems(root) + layers.loop_problems(root)

    def test_two_files_naming_each_other_are_a_loop(self):
        found = self.check({"meshlimit-core": ([], {
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B;\nfn f() -> crate::a::A { crate::a::A }\n",
        })})
        self.assertEqual(len(found), 1, found)
        self.assertIn("core/src/a.rs, core/src/b.rs", found[0])

    def test_a_loop_through_super_and_a_use_group_is_found(self):
        found = self.check({"meshlimit-core": ([], {
            "lib.rs": "pub mod rules;\n",
            "rules/mod.rs": "pub mod x;\npub mod y;\n",
            "rules/x.rs": "use super::{y::Y, z};\npub struct X;\n",
            "rules/y.rs": "pub struct Y(super::x::X);\n",
        })})
        self.assertEqual(len(found), 1, found)
        self.assertIn("core/src/rules/x.rs, core/src/rules/y.rs", found[0])

    def test_parent_and_child_tests_and_comments_are_not_loops(self):
        found = self.check({"meshlimit-core": ([], {
            "lib.rs": "pub mod a;\npub mod b;\n",
            "a.rs": "pub mod inner;\npub use inner::I;\npub fn f() -> crate::a::inner::I { I }\n",
            "a/inner.rs": "pub struct I;\nfn g() { super::f(); }\n",
            "b.rs": "use crate::a::I;\n// crate::b is named in a comment of a\n"
                    "#[cfg(test)]\nmod tests { use crate::a::f; }\n",
        })})
        self.assertEqual(found, [])

    def test_a_crate_depending_upwards_is_refused(self):
        found = self.check({
            "meshlimit-core": (["meshlimit-store"], {"lib.rs": ""}),
            "meshlimit-store": (["meshlimit-core"], {"lib.rs": ""}),
            "meshlimit-agent": (["meshlimit-core", "meshlimit-store"], {"lib.rs": ""}),
        })
        self.assertEqual(len(found), 1, found)
        self.assertIn("meshlimit-core depends on meshlimit-store", found[0])


if __name__ == "__main__":
    unittest.main()
