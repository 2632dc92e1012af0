"""tools/check-doc-links.py finds what a reader would trip on, and only that."""

import importlib.util
import subprocess
import tempfile
import unittest
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "check_doc_links", Path(__file__).with_name("check-doc-links.py"))
links = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(links)


class Repo:
    """A throwaway git repository holding the given files."""

    def __init__(self, files):
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)
        for name, text in files.items():
            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        subprocess.run(["git", "init", "-q"], cwd=self.root, check=True)

    def problems(self):
        files = links.tracked_markdown(self.root)
        errors, cache = links.size_errors(self.root, files), {}
        for path in files:
            for number, target in links.links(path):
                why = links.check_link(self.root, path, target, cache)
                if why:
                    errors.append(f"{path.relative_to(self.root)}:{number}: {target} ({why})")
        return errors


class CheckDocLinks(unittest.TestCase):
    def test_a_good_link_and_anchor_pass(self):
        repo = Repo({
            "README.md": "See [rules](docs/guide/rules.md#a-keyed-rule).\n",
            "docs/guide/rules.md": "# Rules\n\n## A keyed rule\n",
        })
        self.assertEqual(repo.problems(), [])

    def test_a_missing_file_is_named_with_its_line(self):
        repo = Repo({"README.md": "one\n\n[gone](docs/gone.md)\n"})
        self.assertEqual(repo.problems(), ["README.md:3: docs/gone.md (no such file)"])

    def test_a_missing_anchor_is_named(self):
        repo = Repo({
            "a.md": "[x](b.md#no-such)\n",
            "b.md": "# B\n\n## Something else\n",
        })
        self.assertEqual(repo.problems(), ["a.md:1: b.md#no-such (no heading with anchor #no-such)"])

    def test_a_repeated_heading_gets_a_numbered_anchor(self):
        repo = Repo({"a.md": "## Steps\n\n## Steps\n\n[second](#steps-1)\n"})
        self.assertEqual(repo.problems(), [])

    def test_links_in_code_are_not_links(self):
        repo = Repo({"a.md": "```\n[x](nowhere.md)\n```\n\n`[y](nowhere.md)`\n"})
        self.assertEqual(repo.problems(), [])

    def test_a_page_of_the_book_over_its_limit_is_refused(self):
        repo = Repo({"docs/big.md": "x" * (links.PAGE_LIMIT + 1)})
        self.assertEqual(len(repo.problems()), 1)
        self.assertIn("over the book's page limit", repo.problems()[0])

    def test_urls_are_not_fetched(self):
        repo = Repo({"a.md": "[up](https://example.invalid/x.md#y)\n"})
        self.assertEqual(repo.problems(), [])


if __name__ == "__main__":
    unittest.main()
