#!/usr/bin/env python3
"""Import cycles between the modules of each crate of the workspace.

Usage: python3 scripts/module_cycles.py [-v] [--top]

Walks every crate root (lib.rs, main.rs) through its `mod` declarations and
records an edge A -> B whenever module A names an item of module B: a `use`
of `crate::`, `super::`, `self::` or a child module, or such a path written
inline in code. Edges to a module's own descendants through `mod` and
`pub use` re-export lines are not dependencies and are skipped, as is code in
`#[cfg(test)]` modules. Exits 1 and prints each cycle (strongly connected
component) when there is one; `-v` also prints every edge, `--top` the
`vmm` library's top-level module graph in layer order (each module and the
lower ones it uses).

For the `vmm` library it also checks the layer order: the table under
"## Layers of `vmm`" in ARCHITECTURE.md lists every top-level module, lowest
first, and an import from a top-level module may only name a module listed
before it. A module missing from the table, or listed twice, fails too.
"""

import os
import re
import sys

ROOTS = [
    "xstate/src/lib.rs",
    "guest/src/lib.rs",
    "guest/src/main.rs",
    "vmm/src/lib.rs",
    "vmm/src/main.rs",
]

MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
# A module declared for tests only (`#[cfg(test)] mod tests;`, its code in a
# file of its own) is test code, like an inline `#[cfg(test)] mod` block.
TEST_MOD_DECL = re.compile(
    r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*;"
)
PATH = re.compile(r"\b((?:crate|super|self)(?:::\w+)+|\w+(?:::\w+)+)")


def strip_comments_and_tests(text):
    """Drop comments, string literals and `#[cfg(test)] mod ... { }` blocks."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return TEST_MOD_DECL.sub("", "".join(out))


def module_file(parent_file, name):
    base = os.path.dirname(parent_file)
    stem = os.path.basename(parent_file)
    if stem not in ("lib.rs", "main.rs", "mod.rs"):
        base = os.path.join(base, stem[:-3])
    for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
        if os.path.exists(cand):
            return cand
    return None


def walk(root):
    """Module path tuple -> file, for one crate."""
    mods = {(): root}
    stack = [((), root)]
    while stack:
        path, f = stack.pop()
        with open(f) as fh:
            text = strip_comments_and_tests(fh.read())
        for name in MOD_DECL.findall(text):
            child = module_file(f, name)
            if child:
                mods[path + (name,)] = child
                stack.append((path + (name,), child))
    return mods


def resolve(cur, segs, mods, reexports=None):
    """The deepest known module a path names, or None. A name a module only
    re-exports (`pub use`) resolves to the module that defines it."""
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = cur
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
        rest = segs
    elif cur + (segs[0],) in mods:
        base, rest = cur, segs
    else:
        return None
    best = base if base in mods else None
    p = base
    for i, s in enumerate(rest):
        if reexports and (p, s) in reexports:
            return reexports[(p, s)]
        p = p + (s,)
        if p in mods:
            best = p
        else:
            break
    return best


def reexport_map(mods):
    """(module, name) -> defining module, for `pub use` lines."""
    out = {}
    for path, f in mods.items():
        with open(f) as fh:
            text = strip_comments_and_tests(fh.read())
        for m in re.finditer(r"pub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
            spec = " ".join(m.group(1).split())
            g = re.match(r"((?:\w+::)*)\{(.*)\}$", spec)
            items = (
                [(g.group(1) + i.strip()) for i in g.group(2).split(",") if i.strip()]
                if g
                else [spec]
            )
            for item in items:
                item = item.replace(" ", "")
                alias = None
                if "as" in item and "::" in item:
                    parts = re.split(r"\bas\b", item)
                    if len(parts) == 2:
                        item, alias = parts
                segs = item.split("::")
                if len(segs) < 2 or "{" in item:
                    continue
                target = resolve(path, segs, mods)
                if target is not None and target != path:
                    out[(path, alias or segs[-1])] = target
    return out


def crate_edges(root):
    mods = walk(root)
    reexports = reexport_map(mods)
    edges = set()
    for path, f in mods.items():
        with open(f) as fh:
            text = strip_comments_and_tests(fh.read())
        for line in text.splitlines():
            s = line.strip()
            if MOD_DECL.match(line):
                continue
            reexport = s.startswith("pub use") or s.startswith("pub(crate) use")
            # Expand `a::{b, c::d}` groups into `a::b`, `a::c::d`.
            for m in re.finditer(r"((?:\w+::)+)\{([^{}]*)\}", s):
                for item in m.group(2).split(","):
                    item = item.strip().split(" as ")[0]
                    if item and item != "self":
                        s += " " + m.group(1) + item
            for m in PATH.finditer(s):
                segs = m.group(1).split("::")
                target = resolve(path, segs, mods, reexports)
                if target is None or target == path:
                    continue
                # A module re-exporting its own descendant's item is their
                # facade, not a dependency; re-exporting anything else is.
                if reexport and target[: len(path)] == path:
                    continue
                # A module naming its own descendant is not a cycle risk here
                # unless the descendant names it back: keep the edge.
                edges.add((path, target))
    return mods, edges


def sccs(nodes, edges):
    adj = {n: [] for n in nodes}
    for a, b in edges:
        adj[a].append(b)
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
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
            if len(comp) > 1:
                out.append(comp)

    sys.setrecursionlimit(10000)
    for n in nodes:
        if n not in index:
            visit(n)
    return out


def name(crate, path):
    return crate + ("::" + "::".join(path) if path else "")


def declared_layers(path="ARCHITECTURE.md"):
    """Top-level modules of `vmm` in their declared order, lowest first:
    the second column of the table after the "## Layers of `vmm`" heading."""
    with open(path) as fh:
        text = fh.read()
    at = text.find("## Layers of `vmm`")
    if at < 0:
        return None
    order = []
    for line in text[at:].splitlines()[1:]:
        if line.startswith("## "):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[1].startswith("`"):
            order += re.findall(r"`(\w+)`", cells[1])
    return order


def check_layers(mods, edges, order):
    """Messages for every top-level edge that does not point down, and for
    every top-level module the order misses or repeats."""
    top = sorted({p[0] for p in mods if p})
    bad = []
    for m in top:
        if m not in order:
            bad.append(f"vmm::{m} is in no layer of ARCHITECTURE.md")
    for m in set(order):
        if order.count(m) > 1:
            bad.append(f"vmm::{m} is listed {order.count(m)} times in ARCHITECTURE.md")
        if m not in top:
            bad.append(f"ARCHITECTURE.md lists vmm::{m}, which lib.rs does not declare")
    rank = {m: i for i, m in enumerate(order)}
    for a, b in sorted(edges):
        if not a or not b or a[0] == b[0] or a[0] not in rank or b[0] not in rank:
            continue
        if rank[b[0]] > rank[a[0]]:
            bad.append(
                f"layer order: vmm::{'::'.join(a)} uses vmm::{'::'.join(b)}, "
                f"which ARCHITECTURE.md puts above it"
            )
    return bad


def main():
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(top)
    verbose = "-v" in sys.argv
    bad = 0
    for root in ROOTS:
        if not os.path.exists(root):
            continue
        crate = root.split("/")[0] + ("(bin)" if root.endswith("main.rs") else "")
        mods, edges = crate_edges(root)
        if verbose:
            for a, b in sorted(edges):
                print(f"  {name(crate, a)} -> {name(crate, b)}")
        comps = sccs(list(mods), edges)
        for comp in comps:
            bad += 1
            members = sorted(comp)
            print(f"cycle in {crate}: " + " <-> ".join(name(crate, m) for m in members))
            for a, b in sorted(edges):
                if a in comp and b in comp:
                    print(f"    {name(crate, a)} -> {name(crate, b)}")
        print(f"{crate}: {len(mods)} modules, {len(edges)} edges, {len(comps)} cycles")
        if root == "vmm/src/lib.rs":
            order = declared_layers()
            problems = ["ARCHITECTURE.md has no layer table"] if order is None else check_layers(
                mods, edges, order
            )
            for p in problems:
                print(p)
            bad += len(problems)
            if order is not None:
                print(f"vmm: {len(order)} top-level modules in layer order, {len(problems)} violations")
                if "--top" in sys.argv:
                    for m in order:
                        uses = sorted(
                            {b[0] for a, b in edges if a and b and a[0] == m and b[0] != m},
                            key=order.index,
                        )
                        print(f"  {m} -> {', '.join(uses) if uses else '(nothing)'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
