#!/usr/bin/env python3
"""Count the public items of the `vmm` library crate (issue 36).

Usage:
    python3 scripts/public_items.py            # build rustdoc JSON, then count
    python3 scripts/public_items.py --no-build # count target/doc/vmm.json as is
    python3 scripts/public_items.py --json PATH

The JSON comes from nightly rustdoc with hidden items included, so that
`#[doc(hidden)]` items can be counted apart:

    cargo +nightly rustdoc -p vmm --lib -- -Z unstable-options \
        --output-format json --document-hidden-items

Rule: a walk from the crate root through public paths. A public module
leads to its public items; a public `use` leads to the item it re-exports
(a glob to every public item of its module) when that item is this
crate's. Every item of crate 0 reached this way is counted once, under the
top-level module of the first path that reaches it (breadth first, names
sorted). "Items" are the nameable ones: modules, structs, enums, unions,
traits, functions, type aliases, constants, statics, macros. "Members" are
what hangs off a reached struct, enum or trait: public fields, variants,
public inherent methods and associated items, trait items (trait impls
are not counted). An item is "hidden" when it or a module on every path to
it is `#[doc(hidden)]`: the visible walk skips hidden items; what only the
full walk reaches is hidden.
"""

import argparse
import collections
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMED = {
    "module", "struct", "enum", "union", "trait", "function", "type_alias",
    "constant", "static", "macro", "proc_macro", "trait_alias",
}


def kind(item):
    return next(iter(item["inner"]))


def is_hidden(item):
    for a in item.get("attrs") or []:
        text = a.get("other", "") if isinstance(a, dict) else str(a)
        if "doc(hidden)" in text.replace(" ", ""):
            return True
    return False


def is_public(item):
    return item.get("visibility") == "public"


def walk(index, root, skip_hidden):
    """Breadth-first from the root: {item id: (top-level module, path)}."""
    reached = {}
    queue = collections.deque([(root, None, "")])
    while queue:
        iid, top, path = queue.popleft()
        item = index.get(str(iid))
        if item is None or item["crate_id"] != 0:
            continue
        if skip_hidden and is_hidden(item):
            continue
        k = kind(item)
        if k == "use":
            use = item["inner"]["use"]
            target = use.get("id")
            if target is None:
                continue
            titem = index.get(str(target))
            if titem is None or titem["crate_id"] != 0:
                continue
            if use.get("is_glob"):
                if kind(titem) == "module":
                    for child in titem["inner"]["module"]["items"]:
                        queue.append((child, top, path))
            else:
                queue.append((target, top, path))
            continue
        if str(iid) in reached:
            continue
        if iid != root:
            reached[str(iid)] = (top, path + "::" + str(item["name"]))
        if k == "module":
            children = []
            for child in item["inner"]["module"]["items"]:
                c = index.get(str(child))
                if c is not None and is_public(c):
                    children.append((str(c.get("name") or ""), child))
            for name, child in sorted(children, key=lambda t: t[0]):
                if iid == root:
                    ctop = name if kind(index[str(child)]) == "module" else "(root)"
                    queue.append((child, ctop, "vmm"))
                else:
                    queue.append((child, top, path + "::" + str(item["name"])))
    return reached


def members(index, iid, skip_hidden):
    """Public fields, variants, inherent methods and trait items of a type."""
    item = index[str(iid)]
    k = kind(item)
    inner = item["inner"][k]
    ids = []
    if k == "struct":
        skind = inner.get("kind")
        if isinstance(skind, dict):
            if "plain" in skind:
                ids += skind["plain"].get("fields", [])
            elif "tuple" in skind:
                ids += [f for f in skind["tuple"] if f is not None]
    elif k == "union":
        ids += inner.get("fields", [])
    elif k == "enum":
        ids += inner.get("variants", [])
    elif k == "trait":
        ids += inner.get("items", [])
    for impl_id in inner.get("impls", []) if k in ("struct", "enum", "union") else []:
        impl = index.get(str(impl_id))
        if impl is None or impl["crate_id"] != 0:
            continue
        im = impl["inner"]["impl"]
        if im.get("trait") is not None or im.get("is_synthetic"):
            continue
        ids += im.get("items", [])
    out = []
    for m in ids:
        mi = index.get(str(m))
        if mi is None:
            continue
        mk = kind(mi)
        if skip_hidden and is_hidden(mi):
            continue
        if mk in ("variant",) or is_public(mi) or k == "trait":
            out.append(str(m))
        if mk == "variant":
            # A variant's named fields are part of it, not counted apart.
            pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=os.path.join(ROOT, "target", "doc", "vmm.json"))
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--list", action="store_true", help="print every item's path")
    args = ap.parse_args()
    if not args.no_build:
        subprocess.run(
            ["cargo", "+nightly", "rustdoc", "-p", "vmm", "--lib", "--quiet", "--",
             "-Z", "unstable-options", "--output-format", "json", "--document-hidden-items"],
            cwd=ROOT, check=True)
    with open(args.json) as f:
        doc = json.load(f)
    index = doc["index"]
    root = doc["root"]
    visible = walk(index, root, skip_hidden=True)
    everything = walk(index, root, skip_hidden=False)
    hidden = {k: v for k, v in everything.items() if k not in visible}

    def tally(reached, skip_hidden, exclude=()):
        items = collections.Counter()
        mems = collections.Counter()
        for iid, (top, _) in reached.items():
            if kind(index[iid]) not in NAMED:
                continue
            items[top] += 1
            mems[top] += len([m for m in members(index, iid, skip_hidden) if m not in exclude])
        return items, mems

    vis_items, vis_mems = tally(visible, True)
    visible_members = set()
    for iid in visible:
        if kind(index[iid]) in NAMED:
            visible_members.update(members(index, iid, True))
    all_items, all_mems = tally(everything, False, exclude=visible_members)
    hid_items = collections.Counter()
    hid_mems = collections.Counter()
    for top in set(all_items) | set(vis_items):
        hid_items[top] = all_items[top] - vis_items[top]
        hid_mems[top] = all_mems[top]

    tops = sorted(set(all_items) | set(vis_items), key=lambda t: (t == "(root)", t))
    print(f"{'module':<16}{'items':>7}{'members':>9}{'hidden items':>14}{'hidden members':>16}")
    for t in tops:
        print(f"{t:<16}{vis_items[t]:>7}{vis_mems[t]:>9}{hid_items[t]:>14}{hid_mems[t]:>16}")
    print(f"{'total':<16}{sum(vis_items.values()):>7}{sum(vis_mems.values()):>9}"
          f"{sum(hid_items.values()):>14}{sum(hid_mems.values()):>16}")
    if args.list:
        for iid, (top, path) in sorted(everything.items(), key=lambda t: t[1][1]):
            if kind(index[iid]) in NAMED:
                tag = " (hidden)" if iid in hidden else ""
                print(f"{kind(index[iid]):<11} {path}{tag}")


if __name__ == "__main__":
    sys.exit(main())
