#!/usr/bin/env python3
"""The module graph of each crate, from its `use crate::…`, `super::…` and inline `crate::…`
paths, and a check that it has no circle.

    scripts/layers.py             check every crate; exit 1 naming each circle found
    scripts/layers.py --graph C   print crate C's modules (lines of non-test code) and the
                                  modules each one imports

It also checks that no non-test function of the broker crate runs over FUNCTION_LINES_MAX
lines (from its `fn` line to its closing brace): the broker is where functions grow.

A module is a file: `src/a.rs` or `src/a/mod.rs` is `a`, `src/a/b.rs` is `a::b`. A path
`crate::a::b::Name` is an import of the deepest module it names (`a::b` if that is a file,
else `a`); a name that `a/mod.rs` re-exports from a child (`pub use b::Name`) is an import of
that child, so a parent module that only declares and re-exports its children imports
nothing. A module's own children (`mod b;`) are not its imports. Lines after the first
`#[cfg(test)]` of a file are tests and are not read.
"""

import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

USE_RE = re.compile(r"\buse\s+([^;]*);", re.S)
PATH_RE = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)+")
PUB_USE_RE = re.compile(r"\bpub(?:\([a-z]+\))?\s+use\s+(?!crate|super)[a-z_][a-z0-9_]*::[^;]*;", re.S)


def crates():
    for name in sorted(os.listdir(ROOT)):
        src = os.path.join(ROOT, name, "src")
        if os.path.isfile(os.path.join(ROOT, name, "Cargo.toml")) and os.path.isdir(src):
            yield name, src


def module_files(src):
    """{module path (tuple): file} for every module file under src, binaries apart."""
    modules = {}
    for dirpath, _, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        if parts[:1] == ("bin",):
            continue
        for f in files:
            if not f.endswith(".rs"):
                continue
            stem = f[:-3]
            if parts == () and stem in ("lib", "main"):
                path = ()
            elif stem == "mod":
                path = parts
            else:
                path = parts + (stem,)
            modules[path] = os.path.join(dirpath, f)
    return modules


def non_test_source(path):
    text = open(path, encoding="utf-8").read()
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    # Comments say nothing about imports.
    text = re.sub(r"//[^\n]*", "", text)
    return text


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, s):
        depth, start, items = 0, 0, []
        for i, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                items.append(s[start:i])
                start = i + 1
        items.append(s[start:])
        for item in items:
            if not item:
                continue
            brace = item.find("{")
            if brace >= 0 and item.endswith("}"):
                head = item[:brace].rstrip(":")
                walk(prefix + ([head] if head else []), item[brace + 1 : -1])
            else:
                name = item.split("as")[0] if "as" in item.split("::")[-1] else item
                name = re.sub(r"as[A-Za-z_0-9]+$", "", name) if "::" not in name else name
                out.append("::".join(prefix + [name]))

    walk([], tree)
    return out


def reexports(modules):
    """{(module, name): child module} for `pub use child::…::Name` in a parent module."""
    found = {}
    for path, file in modules.items():
        for m in USE_RE.finditer(non_test_source(file)):
            start = m.start()
            line_start = non_test_source(file).rfind("\n", 0, start) + 1
            if "pub" not in non_test_source(file)[line_start:start]:
                continue
            for used in expand_use_tree(m.group(1)):
                segs = used.split("::")
                if segs[0] in ("crate", "super", "self", "std"):
                    continue
                child = path + (segs[0],)
                if child in modules:
                    name = segs[-1].split("as")[0]
                    found[(path, name)] = child
    return found


def resolve(modules, exports, here, segs):
    """The module a path from module `here` names, or None for one outside the crate."""
    if not segs:
        return None
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    elif segs[0] == "super":
        base, rest = here, segs
        while rest and rest[0] == "super":
            base, rest = base[:-1], rest[1:]
    elif segs[0] == "self":
        base, rest = here, segs[1:]
    else:
        return None
    target = base
    for i, seg in enumerate(rest):
        if target + (seg,) in modules:
            target = target + (seg,)
            continue
        # A name re-exported from a child of `target`.
        while (target, seg) in exports:
            target = exports[(target, seg)]
        break
    return target


def graph(src):
    modules = module_files(src)
    exports = reexports(modules)
    edges = defaultdict(set)
    lines = {}
    for path, file in modules.items():
        text = non_test_source(file)
        lines[path] = sum(1 for l in text.splitlines() if l.strip())
        # A parent's `pub use child::…` re-exports its child: structure, not an import.
        private = PUB_USE_RE.sub("", text)
        paths = []
        for m in USE_RE.finditer(private):
            paths.extend(expand_use_tree(m.group(1)))
        for m in PATH_RE.finditer(USE_RE.sub("", private)):
            paths.append(m.group(0))
        for p in paths:
            segs = p.split("::")
            if segs[0] == "self":
                continue
            if segs[0] not in ("crate", "super"):
                # A path from this module: `child::item`.
                if path + (segs[0],) not in modules:
                    continue
                segs = ["self"] + segs
                target = resolve(modules, exports, path, ["crate", *path, *segs[1:]])
            else:
                target = resolve(modules, exports, path, segs)
            if target is None or target == path:
                continue
            edges[path].add(target)
    return modules, edges, lines


def cycles(nodes, edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


FUNCTION_LINES_MAX = 100
FN_RE = re.compile(r"^\s*(?:pub(?:\([a-z]+\))?\s+)?(?:async\s+)?(?:const\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def long_functions(src):
    """(file, line, name, lines) of each function in src longer than FUNCTION_LINES_MAX."""
    out = []
    for path in sorted(module_files(src).values()):
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            if re.match(r"\s*#\[cfg\(test\)\]", lines[i]):
                break
            m = FN_RE.match(lines[i])
            if not m:
                i += 1
                continue
            depth, opened, j = 0, False, i
            while j < len(lines):
                code = re.sub(r"//.*", "", lines[j])
                code = re.sub(r"'(?:\\.|[^\\'])'", "", re.sub(r'"(?:\\.|[^"\\])*"', "", code))
                depth += code.count("{") - code.count("}")
                opened = opened or "{" in code
                if (opened and depth <= 0) or (not opened and code.rstrip().endswith(";")):
                    break
                j += 1
            if j - i + 1 > FUNCTION_LINES_MAX:
                out.append((os.path.relpath(path, ROOT), i + 1, m.group(1), j - i + 1))
            i = j + 1
    return out


def name(path):
    return "::".join(path) if path else "(root)"


def main():
    args = sys.argv[1:]
    if args[:1] == ["--graph"]:
        src = os.path.join(ROOT, args[1], "src")
        modules, edges, lines = graph(src)
        for path in sorted(modules):
            deps = sorted(name(d) for d in edges.get(path, ()))
            print(f"{name(path):32} {lines[path]:5}  -> {', '.join(deps)}")
        return 0
    failed = False
    for crate, src in crates():
        modules, edges, _ = graph(src)
        # The crate root declares every top-level module; its own imports are not layering.
        edges = {k: v for k, v in edges.items() if k != ()}
        for comp in cycles(list(modules), edges):
            failed = True
            print(f"{crate}: modules import each other in a circle: {', '.join(name(c) for c in comp)}")
    for path, line, fn, length in long_functions(os.path.join(ROOT, "broker", "src")):
        failed = True
        print(f"{path}:{line}: fn {fn} is {length} lines, over {FUNCTION_LINES_MAX}")
    if not failed:
        print("layers: no import circle in any crate, no broker function over "
              f"{FUNCTION_LINES_MAX} lines")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
