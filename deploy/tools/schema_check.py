#!/usr/bin/env python3
"""Rules files against the rules file's JSON Schema (docs/rules.schema.json).

    schema_check.py --schema docs/rules.schema.json --good FILE... --bad FILE... \
        --docs README.md docs/guide/*.md

Every --good file (examples, good fixtures, the ConfigMap's rules) must validate;
every --bad file (fixtures whose mistake the schema can express) must not; every
```yaml block of a --docs page that starts a rules file (`version:` and `rules:` at
the top level) must validate. A --good file may be a ConfigMap: its
data["rules.yaml"] is checked. The schema is generated from the agent's own
types (core/src/rules/schema.rs), so this also checks the examples against
what the agent reads.
"""

import argparse
import json
import pathlib
import re
import sys

import jsonschema
import jsonschema.exceptions
import yaml


def load_rules(path):
    doc = yaml.safe_load(pathlib.Path(path).read_text())
    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        doc = yaml.safe_load(doc["data"]["rules.yaml"])
    return doc


def doc_examples(text):
    for m in re.finditer(r"```ya?ml\n(.*?)```", text, re.S):
        block = m.group(1)
        try:
            doc = yaml.safe_load(block)
        except yaml.YAMLError:
            continue
        if isinstance(doc, dict) and "version" in doc and "rules" in doc:
            line = text.count("\n", 0, m.start()) + 2
            yield line, doc


def first_error(validator, doc):
    """The most specific error (jsonschema's best_match), as `path: message`."""
    e = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if e is None:
        return None
    where = "/".join(str(p) for p in e.absolute_path) or "(top)"
    return f"{where}: {e.message}"


def problems(schema, good, bad, docs=()):
    jsonschema.Draft202012Validator.check_schema(schema)
    v = jsonschema.Draft202012Validator(schema)
    found, checked = [], 0
    for path in good:
        checked += 1
        error = first_error(v, load_rules(path))
        if error:
            found.append(f"{path}: {error}")
    for path in bad:
        checked += 1
        if v.is_valid(load_rules(path)):
            found.append(f"{path}: a bad fixture the schema accepts")
    for page in docs:
        for line, doc in doc_examples(pathlib.Path(page).read_text()):
            checked += 1
            error = first_error(v, doc)
            if error:
                found.append(f"{page}:{line}: {error}")
    return found, checked


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schema", required=True, type=pathlib.Path)
    ap.add_argument("--good", nargs="*", default=[])
    ap.add_argument("--bad", nargs="*", default=[])
    ap.add_argument("--docs", nargs="*", default=[])
    args = ap.parse_args()
    schema = json.loads(args.schema.read_text())
    found, checked = problems(schema, args.good, args.bad, args.docs)
    for p in found:
        print(f"FAIL schema: {p}")
    if found:
        return 1
    print(f"ok   {checked} rules files and examples in the docs checked against {args.schema}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
