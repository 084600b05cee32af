#!/usr/bin/env python3
"""Import circles between sibling modules of a Rust crate.

    scripts/import-cycles.py SRC_ROOT [CRATE_NAME]

SRC_ROOT is the folder of the crate root (`host`, `gpu-kernels/src`); the
root file is lib.rs or main.rs there. For every module with children, it
draws an edge from child A to child B when any file of A (A's own file or
one below it) names B by path: `super::B`, `crate::PATH::B` or, in the
crate root's children, `crate::B`. Prints each circle (a strongly connected
set of two or more siblings) with one line that closes it, and exits 1 when
there is one; prints `no import circles` and exits 0 otherwise.

Q: why siblings, not files?
A: a parent and its own children always name each other (`mod x;` one way,
`super::` the other); a circle that matters is two modules at one level
each needing the other, which no reader can take in order.
"""

import os
import re
import sys


def module_files(root):
    """Map module path (tuple of names; () is the crate root) -> file."""
    mods = {}
    root_file = next(
        (os.path.join(root, f) for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(root, f))),
        None,
    )
    if root_file is None:
        sys.exit(f"no lib.rs or main.rs in {root}")
    mods[()] = root_file
    for dirpath, _, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        for f in files:
            if not f.endswith(".rs"):
                continue
            name = f[:-3]
            if parts == () and name in ("lib", "main"):
                continue
            path = parts if name == "mod" else parts + (name,)
            mods[path] = os.path.join(dirpath, f)
    return mods


STRIP = [
    (re.compile(r"//.*"), ""),
    (re.compile(r'"([^"\\]|\\.)*"'), '""'),
]
PATH = re.compile(r"\b((?:crate|super|self)(?:::(?:super|\w+))+)")
USE_GROUP = re.compile(r"\buse\s+((?:crate|super|self)(?:::\w+)*)::\{([^;]*)\};", re.S)


def paths_in(text):
    """Every module path a file names, grouped uses expanded."""
    for pat, rep in STRIP:
        text = pat.sub(rep, text)
    out = []
    for m in USE_GROUP.finditer(text):
        base = m.group(1)
        for item in re.split(r"[,\s]+", m.group(2)):
            item = item.strip("{} ")
            if item and re.match(r"^\w+(::\w+)*$", item):
                out.append(base + "::" + item)
    out += [m.group(1) for m in PATH.finditer(text)]
    return out


def resolve(path, here):
    """Absolute module path of `path` named from module `here`, or None."""
    segs = path.split("::")
    if segs[0] == "crate":
        cur, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        cur = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                cur = cur[:-1]
            segs = segs[1:]
    else:
        return None
    return cur + tuple(segs)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    mods = module_files(root)
    known = set(mods)
    edges = {}
    for mod, file in mods.items():
        # A file inside a module folder is `mod.rs` or `name.rs`: the
        # module it defines is `mod`.
        text = open(file, encoding="utf-8", errors="replace").read()
        for p in paths_in(text):
            target = resolve(p, mod)
            if target is None:
                continue
            # Trim to the longest known module.
            while target and target not in known:
                target = target[:-1]
            if not target:
                continue
            # The level where the two part: siblings under a common parent.
            k = 0
            while k < min(len(mod), len(target)) and mod[k] == target[k]:
                k += 1
            if k >= len(mod) or k >= len(target):
                continue  # one contains the other
            a, b = mod[: k + 1], target[: k + 1]
            edges.setdefault(a, {}).setdefault(b, (file, p))
    cycles = sccs(edges)
    if not cycles:
        print(f"no import circles ({len(mods)} modules, {sum(len(v) for v in edges.values())} sibling edges)")
        return 0
    for c in cycles:
        names = sorted("::".join(m) for m in c)
        print("circle:", " <-> ".join(names))
        for a in sorted(c):
            for b, (file, p) in sorted(edges.get(a, {}).items()):
                if b in c:
                    print(f"  {'::'.join(a)} -> {'::'.join(b)}: {file} names {p}")
    return 1


def sccs(edges):
    """Tarjan's strongly connected components of two or more nodes."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
