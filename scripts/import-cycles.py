#!/usr/bin/env python3
"""Import circles among the Rust files of crate source folders (the layering gate of .ci/run).

    scripts/import-cycles.py [--modules] SRC...

A file uses another when it names it by path: `crate::a::b` anywhere in its text before its
first `#[cfg(test)]` (a `use`, a path in code, or a doc link: a doc that links a module above
its own ties it there too), and `super::x` resolved from the file's own module. A path names
the longest module it starts with (`crate::a::b::Item` is `a/b.rs` or `a/b/mod.rs` where that
exists, else `a`). With --modules, each crate's top-level modules are also checked as wholes
(a folder and its files one node; test files, named `tests` or `*_tests`, left out): a
circle there is two parts of the crate each using the other, even when no two files do.

Prints one line per circle, `SRC: a, b/c, ...` (files) or `SRC: modules a, b, ...` (with
--modules), sorted; prints nothing and exits 0 when there is none, exits 1 otherwise.
"""

import os
import re
import sys

PATH = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def module_files(src):
    """Module path (a tuple of names; () for lib.rs/main.rs) to its file."""
    files = {}
    for folder, _, names in os.walk(src):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            parts = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            files[tuple(parts)] = path
    return files


def uses(files):
    """Each module to the set of other modules its text names."""
    out = {}
    for module, path in files.items():
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().split("#[cfg(test)]")[0]
        named = set()
        for m in PATH.finditer(text):
            rest = tuple(p for p in m.group(2).split("::") if p)
            if m.group(1) == "crate":
                full = rest
            else:
                # `super` is the file's parent module, each further `super` one up again
                # (inline `mod x { }` blocks are not told apart: a gate on files).
                base = module[:-1]
                while rest and rest[0] == "super":
                    base, rest = base[:-1], rest[1:]
                full = base + rest
            for k in range(len(full), 0, -1):
                if full[:k] in files:
                    if full[:k] != module:
                        named.add(full[:k])
                    break
        out[module] = named
    return out


def circles(graph):
    """Strongly connected parts of more than one node (Tarjan's, without recursion)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    part.append(top)
                    if top == node:
                        break
                if len(part) > 1:
                    found.append(part)
    return found


def is_test(module):
    return any(p == "tests" or p.endswith("_tests") for p in module)


def top_level(graph):
    """The graph of top-level modules: each file counts as its first path element."""
    out = {}
    for module, named in graph.items():
        if not module or is_test(module):
            continue
        out.setdefault(module[:1], set())
        for other in named:
            if other and other[:1] != module[:1] and not is_test(other):
                out[module[:1]].add(other[:1])
    return out


def name(module):
    return "/".join(module) or "lib"


def main(argv):
    whole_modules = "--modules" in argv
    sources = [a for a in argv if a != "--modules"]
    if not sources:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    lines = []
    for src in sources:
        if not os.path.isdir(src):
            print(f"import-cycles: {src}: not a folder", file=sys.stderr)
            return 2
        graph = uses(module_files(src))
        for part in circles(graph):
            lines.append(f"{src}: " + ", ".join(sorted(name(m) for m in part)))
        if whole_modules:
            for part in circles(top_level(graph)):
                lines.append(f"{src}: modules " + ", ".join(sorted(name(m) for m in part)))
    for line in sorted(lines):
        print(line)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
