#!/usr/bin/env python3
"""Checks the layout rules that the compiler does not: run by scripts/test.sh.

1. No two sibling files of a crate import each other (a parent module and its own child may:
   the child uses what the parent declares). Crates cannot form cycles; cargo refuses them.
2. `unsafe` code only in the capsule-sys crate (sys/src/), the one crate whose root allows it;
   every other crate root forbids it.

Exits 1 and names each violation.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["wire", "pcap", "query", "store", "index", "sys", "capture", "bpf", "replay", "synth", "config", "analytics", "."]
# The one crate allowed `unsafe` code.
UNSAFE_CRATE = "sys"


def module_of(src, path):
    parts = os.path.relpath(path, src)[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def without_tests(text):
    # Unit tests may reach anywhere in their crate.
    return re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]


def rust_files(src):
    for d, _, files in os.walk(src):
        for f in sorted(files):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def check_cycles(crate, problems):
    src = os.path.join(ROOT, crate, "src")
    mods = {module_of(src, f): f for f in rust_files(src)}
    edges = set()
    for m, f in mods.items():
        text = without_tests(open(f, encoding="utf-8").read())
        for ref in re.findall(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
            parts = tuple(ref.split("::"))
            for k in range(len(parts), 0, -1):
                if parts[:k] in mods and parts[:k] != m:
                    edges.add((m, parts[:k]))
                    break
        parent = m[:-1]
        for ref in re.findall(r"\bsuper::([a-z_][a-z0-9_]*)", text):
            target = parent + (ref,)
            if target in mods and target != m:
                edges.add((m, target))
    for a, b in sorted(edges):
        if (b, a) in edges and a < b:
            related = a == b[: len(a)] or b == a[: len(b)]
            if not related:
                problems.append(
                    f"{crate}: {'::'.join(a) or 'root'} and {'::'.join(b) or 'root'} import each other"
                )


def check_unsafe(crate, problems):
    src = os.path.join(ROOT, crate, "src")
    root = os.path.join(src, "main.rs" if crate == "." else "lib.rs")
    root_text = open(root, encoding="utf-8").read()
    if crate != UNSAFE_CRATE and "#![forbid(unsafe_code)]" not in root_text:
        problems.append(f"{os.path.relpath(root, ROOT)}: no #![forbid(unsafe_code)]")
    if crate == UNSAFE_CRATE:
        return
    for f in rust_files(src):
        rel = os.path.relpath(f, ROOT)
        code = re.sub(r"//.*", "", open(f, encoding="utf-8").read())
        if re.search(r"\bunsafe\s*(\{|fn|impl|trait)", code):
            problems.append(f"{rel}: unsafe code outside {UNSAFE_CRATE}/src/")


def main():
    problems = []
    for crate in CRATES:
        check_cycles(crate, problems)
        check_unsafe(crate, problems)
    for p in problems:
        print(f"layout: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
