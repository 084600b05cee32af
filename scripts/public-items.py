#!/usr/bin/env python3
"""Count the public API of the `ibp` library, from rustdoc's JSON.

    cargo rustdoc --lib --features cuda -- -Z unstable-options --output-format json
    scripts/public-items.py target/doc/ibp.json [--list]

Counts the items a user can name (rustdoc's index of this crate, without
`#[doc(hidden)]` ones and without the implementation blocks themselves):
modules, types, traits, functions, constants, and the methods, fields and
variants that are public. Prints the count by kind (and with --list every
item's path), for the README's API section.
"""
import json
import sys
from collections import Counter


def main():
    doc = json.load(open(sys.argv[1]))
    root_crate = doc["index"][str(doc["root"])]["crate_id"] if str(doc["root"]) in doc["index"] else 0
    index = doc["index"]
    kinds = Counter()
    names = []
    # Walk from the root module through public items only.
    seen = set()

    def kind_of(item):
        return next(iter(item["inner"])) if isinstance(item["inner"], dict) else item["inner"]

    def walk(iid, path):
        if iid in seen or str(iid) not in index:
            return
        seen.add(iid)
        item = index[str(iid)]
        if item.get("crate_id", 0) != root_crate:
            return
        k = kind_of(item)
        inner = item["inner"][k] if isinstance(item["inner"], dict) else {}
        name = item.get("name")
        if k == "use":
            target = inner.get("id")
            if target is not None:
                walk(target, path)
            return
        if k != "impl":
            if item.get("visibility") not in ("public", "default") and k not in ("variant",):
                return
            p = path + [name] if name else path
            kinds[k] += 1
            names.append((k, "::".join(p)))
        else:
            p = path
        for child in children(k, inner):
            walk(child, p if k == "impl" else (path + [name] if name else path))

    def children(k, inner):
        out = []
        if k == "module":
            out += inner.get("items", [])
        elif k in ("struct", "enum", "union"):
            kind = inner.get("kind", {})
            if isinstance(kind, dict):
                plain = kind.get("plain", {})
                out += plain.get("fields", []) if isinstance(plain, dict) else []
                tup = kind.get("tuple")
                if isinstance(tup, list):
                    out += [f for f in tup if f is not None]
            out += inner.get("variants", [])
            out += inner.get("impls", [])
        elif k == "trait":
            out += inner.get("items", [])
        elif k == "impl":
            if inner.get("trait") is None and not inner.get("is_synthetic"):
                out += inner.get("items", [])
        return out

    walk(doc["root"], [])
    total = sum(kinds.values())
    print(f"{total} public items: " + ", ".join(f"{v} {k}" for k, v in kinds.most_common()))
    if "--list" in sys.argv:
        for k, n in sorted(names, key=lambda x: x[1]):
            print(f"{k:10} {n}")


if __name__ == "__main__":
    main()
