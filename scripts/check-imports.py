"""Checks that every module imports only what ARCHITECTURE.md allows it (the `imports` block).

    python3 scripts/check-imports.py

Reads `import X` lines (also `@testable import`, and imports inside `#if canImport(...)`) of every
Swift file under Sources/<Module>/ and fails on a module the table does not list for it, or a
module the table does not know. The standard library's modules are allowed everywhere.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALWAYS = {"Foundation", "FoundationNetworking", "Dispatch", "Glibc", "Synchronization", "Darwin"}
IMPORT = re.compile(r"^\s*(?:@testable\s+)?import\s+(?:(?:struct|class|enum|protocol|func|var|let)\s+)?([A-Za-z_][A-Za-z0-9_]*)")


def allowed_imports():
    text = open(os.path.join(ROOT, "ARCHITECTURE.md")).read()
    block = re.search(r"```imports\n(.*?)```", text, re.S)
    if not block:
        sys.exit("[imports] ARCHITECTURE.md has no ```imports block")
    table = {}
    for line in block.group(1).splitlines():
        if ":" not in line:
            continue
        module, _, rest = line.partition(":")
        names = [] if "(nothing)" in rest else rest.split()
        table[module.strip()] = set(names)
    return table


# Modules kept with the tests (Package.swift says so by their paths) that the benchmark imports.
SHARED_STAND_INS = ["JOSEFixtures", "KafkaMockCluster"]


def main():
    table = allowed_imports()
    problems = []
    sources = os.path.join(ROOT, "Sources")
    # The modules under Sources/, and the stand-ins under Tests/ that auth-bench imports too.
    modules = [(m, os.path.join(sources, m)) for m in sorted(os.listdir(sources))]
    modules += [(m, os.path.join(ROOT, "Tests", m)) for m in SHARED_STAND_INS]
    for module, path in modules:
        swift = [os.path.join(d, f) for d, _, files in os.walk(path) for f in files if f.endswith(".swift")]
        if not swift:
            continue  # a system library: module.modulemap only
        if module not in table:
            problems.append(f"{module} is not in ARCHITECTURE.md's imports table")
            continue
        for file in swift:
            for number, line in enumerate(open(file), 1):
                match = IMPORT.match(line)
                if not match:
                    continue
                name = match.group(1)
                if name not in ALWAYS and name not in table[module]:
                    problems.append(f"{os.path.relpath(file, ROOT)}:{number}: {module} may not import {name}")
    for problem in problems:
        print(f"[imports] {problem}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"[imports] every module imports only what ARCHITECTURE.md allows ({len(table)} modules)", file=sys.stderr)


if __name__ == "__main__":
    main()
