#!/usr/bin/env python3
"""The largest source files and functions of the workspace, tests left out.

Usage: python3 scripts/sizes.py [N]

Prints the N (default 10) longest files of `xstate/src`, `guest/src` and
`vmm/src` (test files, `tests.rs` and `tests/`, left out) and the N longest
functions, and how many files pass 600 lines and functions 100 (the limits
issue 36 set). A function runs from its `fn` line to the closing brace at
the same indentation (rustfmt's layout); code after `#[cfg(test)]` in a
file is test code and is left out.
"""

import os
import re
import sys

ROOTS = ["xstate/src", "guest/src", "vmm/src"]
FN = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+(\w+)")


def source_files():
    for root in ROOTS:
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if x != "tests"]
            for f in files:
                if f.endswith(".rs") and f != "tests.rs":
                    yield os.path.join(d, f)


def non_test_lines(path):
    lines = open(path, errors="replace").read().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and re.match(r"\s*mod \w+ \{", lines[i + 1]):
            return lines[:i]
    return lines


def functions(path, lines):
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m or line.rstrip().endswith(";"):
            continue
        indent = m.group(1)
        for j in range(i + 1, len(lines)):
            if lines[j].startswith(indent + "}") and not lines[j].startswith(indent + "} else"):
                yield (j - i + 1, f"{path}:{i + 1} {m.group(2)}")
                break


def main():
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(top)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    files, fns = [], []
    for path in source_files():
        lines = non_test_lines(path)
        files.append((len(lines), path))
        fns.extend(functions(path, lines))
    files.sort(reverse=True)
    fns.sort(reverse=True)
    print(f"files: {len(files)}, {sum(f[0] for f in files)} lines; over 600: {sum(f[0] > 600 for f in files)}")
    for size, path in files[:n]:
        print(f"  {size:5} {path}")
    print(f"functions: {len(fns)}; over 100 lines: {sum(f[0] > 100 for f in fns)}")
    for size, where in fns[:n]:
        print(f"  {size:5} {where}")


if __name__ == "__main__":
    main()
