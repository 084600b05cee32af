#!/usr/bin/env python3
"""Import circles between the modules of a Rust crate.

    scripts/import-cycles.py SRC [SRC ...]   e.g. gpu-kernels/src host

SRC is a crate root file (lib.rs, main.rs) or a folder holding one or both.
The modules are found by following `mod name;` from each root (a module per
file; inline `mod x { ... }` blocks count as their file's). An edge A -> B is
a path in A's code (comments left out) that names an item of B: `use`
trees, and `crate::`, `super::` and `self::` paths anywhere in the code.
Each path is resolved to the deepest module it names. An edge between a
module and its own ancestor (a child naming `super::X`, or a parent
re-exporting its child) is containment, not an import, and is left out
unless `--with-parents` is given.

Prints every circle (a strongly connected set of modules, with the edges
that close it) and exits 1 if there is one, 0 if there is none.
`--edges` prints every edge as well; `--depth N` first merges each module
into its ancestor N levels below the crate (`--depth 1`: top-level modules
only).
"""

import argparse
import os
import re
import sys


def strip_comments_and_strings(text):
    """The code of a Rust file with comments, strings and char literals blanked."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            i = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'", text[i:i + 12]):
            m = re.match(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'", text[i:i + 12])
            i += len(m.group(0))
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def find_modules(root_file, crate):
    """{module path tuple: (file, code)} of every module reachable from the root."""
    modules = {}
    stack = [((), root_file)]
    while stack:
        path, f = stack.pop()
        code = strip_comments_and_strings(open(f, encoding="utf-8").read())
        modules[path] = (f, code)
        base = os.path.dirname(f)
        name = os.path.basename(f)
        # A non-root, non-mod.rs file's children live in a folder of its name.
        if path and name != "mod.rs":
            base = os.path.join(base, name[:-3])
        for m in re.finditer(r'(#\[path\s*=\s*""\]\s*)?\bmod\s+([a-z_][a-z0-9_]*)\s*;', code):
            child = m.group(2)
            if m.group(1):
                # The path is in a string, which was blanked: read it again.
                raw = open(f, encoding="utf-8").read()
                p = re.search(r'#\[path\s*=\s*"([^"]+)"\]\s*(pub(\([^)]*\))?\s+)?mod\s+' + child + r"\s*;", raw)
                cand = [os.path.join(os.path.dirname(f), p.group(1))] if p else []
            else:
                cand = [os.path.join(base, child + ".rs"), os.path.join(base, child, "mod.rs")]
            for c in cand:
                if os.path.isfile(c):
                    stack.append((path + (child,), c))
                    break
    return modules


def use_paths(tree, prefix=()):
    """Expand a `use` tree (`a::{b, c::d as e, self}`) into segment tuples."""
    tree = tree.strip()
    out = []
    depth, start, parts = 0, 0, []
    # Split at top-level commas.
    for i, ch in enumerate(tree):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(tree[start:i])
            start = i + 1
    parts.append(tree[start:])
    for part in parts:
        part = part.strip()
        if not part:
            continue
        brace = part.find("{")
        if brace >= 0 and part.endswith("}"):
            head = [s for s in part[:brace].split("::") if s.strip()]
            out += use_paths(part[brace + 1:-1], prefix + tuple(s.strip() for s in head))
        else:
            part = re.sub(r"\s+as\s+\w+$", "", part)
            segs = [s.strip() for s in part.split("::") if s.strip()]
            if segs == ["self"]:
                out.append(prefix)
            else:
                out.append(prefix + tuple(segs))
    return out


def resolve(here, segs, modules):
    """The deepest module a path names, from module `here`; None if outside."""
    if not segs:
        return None
    first = segs[0]
    if first == "crate":
        base, rest = (), list(segs[1:])
    elif first in ("super", "self"):
        base, rest = here, list(segs)
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest.pop(0)
    elif here + (first,) in modules:
        base, rest = here, list(segs)  # a child module named without self::
    else:
        return None  # another crate, or an item of this module
    best = base
    while best and best not in modules:
        best = best[:-1]  # from inside an inline module
    for s in rest:
        if best + (s,) in modules:
            best = best + (s,)
        else:
            break
    return best


def inline_modules(code, here):
    """`(here, code)` pieces of a file: its own code, and each inline `mod x
    { ... }` block's body with `here + (x,)`, where `super::` starts from."""
    pieces, rest, pos = [], [], 0
    for m in re.finditer(r"\bmod\s+([a-z_][a-z0-9_]*)\s*\{", code):
        if m.start() < pos:
            continue  # inside a block already taken
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        rest.append(code[pos:m.start()])
        pieces += inline_modules(code[m.end():i - 1], here + (m.group(1),))
        pos = i
    rest.append(code[pos:])
    return [(here, "".join(rest))] + pieces


def edges_of(modules):
    edges = {}
    for path, (_, file_code) in modules.items():
        found = set()
        for here, code in inline_modules(file_code, path):
            for m in re.finditer(r"\buse\s+([^;]+);", code):
                for segs in use_paths(m.group(1)):
                    t = resolve(here, segs, modules)
                    if t is not None:
                        found.add(t)
            # A child module named bare in code (`batch::run(..)`).
            children = [k[-1] for k in modules if len(k) == len(here) + 1 and k[:-1] == here]
            for c in children:
                if re.search(r"(?<![:\w])" + c + r"\s*::", code):
                    found.add(here + (c,))
            for m in re.finditer(r"\b(crate|super|self)((?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+)", code):
                segs = (m.group(1),) + tuple(s.strip() for s in m.group(2).split("::") if s.strip())
                t = resolve(here, segs, modules)
                if t is not None:
                    found.add(t)
        found.discard(path)
        edges[path] = found
    return edges


def sccs(nodes, edges):
    """Tarjan's strongly connected components."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", nargs="+", help="a crate root file or a folder holding lib.rs and/or main.rs")
    ap.add_argument("--edges", action="store_true", help="print every edge")
    ap.add_argument("--depth", type=int, default=0, help="merge modules below this depth into their ancestor")
    ap.add_argument("--with-parents", action="store_true", help="keep edges between a module and its ancestors")
    a = ap.parse_args()
    roots = []
    for s in a.src:
        if os.path.isdir(s):
            found = [os.path.join(s, r) for r in ("lib.rs", "main.rs") if os.path.isfile(os.path.join(s, r))]
            if not found:
                ap.error(f"{s} holds no lib.rs or main.rs")
            roots += found
        else:
            roots.append(s)
    circles = 0
    for root in roots:
        modules = find_modules(root, root)
        edges = edges_of(modules)

        def merge(p):
            return p[: a.depth] if a.depth else p

        merged = {}
        for v, ws in edges.items():
            mv = merge(v)
            merged.setdefault(mv, set())
            for w in ws:
                mw = merge(w)
                related = mv[: len(mw)] == mw or mw[: len(mv)] == mv
                if mw != mv and (a.with_parents or not related):
                    merged[mv].add(mw)
        name = lambda p: "::".join(("crate",) + p)  # noqa: E731
        n_edges = sum(len(w) for w in merged.values())
        print(f"{root}: {len(merged)} modules, {n_edges} edges")
        if a.edges:
            for v in sorted(merged):
                for w in sorted(merged[v]):
                    print(f"  {name(v)} -> {name(w)}")
        for comp in sccs(merged.keys(), merged):
            if len(comp) < 2:
                continue
            circles += 1
            inside = set(comp)
            print(f"  circle of {len(comp)}: " + ", ".join(name(c) for c in comp))
            for v in comp:
                for w in sorted(merged[v] & inside):
                    print(f"    {name(v)} -> {name(w)}")
    print(f"{circles} import circle(s)")
    return 1 if circles else 0


if __name__ == "__main__":
    sys.exit(main())
