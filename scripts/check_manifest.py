#!/usr/bin/env python3
"""make lint: Package.swift is the module graph, exactly.

Reads the manifest as SwiftPM sees it (`swift package dump-package`, once plain and
once with ENS_FUZZ=1 for the fuzz targets) and holds every target to it:

- each module a source file imports is a direct dependency of its target (SwiftPM
  itself lets a target import whatever its dependencies bring in transitively);
- each direct dependency of a target in Sources/ or Fuzz/ is imported by at least one
  of its files, so the manifest never lists an edge the code does not have.

Test targets are held to both, like the others.

With --table, prints the module table docs/architecture.md carries instead; with
--check-doc FILE, also fails when FILE's table (between the `modules:begin` and
`modules:end` markers) is not the one the manifest gives (one reading of the manifest).
"""
import json
import os
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Always importable: the toolchain's and the platforms' own modules.
TOOLCHAIN = {"Swift", "Glibc", "Darwin", "Synchronization", "Foundation", "FoundationEssentials", "_Concurrency",
             "Testing", "XCTest", "Dispatch", "FoundationNetworking", "Security"}
IMPORT = re.compile(
    r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:public |internal |package |private |fileprivate )?import "
    r"(?:(?:struct|class|enum|func|protocol|typealias|var|let) )?(\w+)", re.M)
BEGIN, END = "<!-- modules:begin (scripts/check_manifest.py --table) -->", "<!-- modules:end -->"


def manifest(fuzz: bool) -> dict:
    env = dict(os.environ)
    env["ENS_FUZZ"] = "1" if fuzz else "0"
    # The integration tests are built only when asked; the manifest is checked with them.
    env["ENS_INTEGRATION_TESTS"] = "1"
    # ENSKit too (the root manifest vends it unless the server's builds leave it out).
    env["ENS_SERVER_ONLY"] = "0"
    out = subprocess.run(["swift", "package", "dump-package"], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def dependencies(target: dict) -> set[str]:
    names = set()
    for dependency in target.get("dependencies", []):
        for kind in ("byName", "target", "product"):
            if kind in dependency:
                names.add(dependency[kind][0])
    return names


def source_dir(target: dict) -> pathlib.Path:
    if target.get("path"):
        return ROOT / target["path"]
    base = "Tests" if target["type"] == "test" else "Sources"
    return ROOT / base / target["name"]


# Multi-line string literals (a test's embedded Python, say) hold no imports of Swift's.
STRING_LITERAL = re.compile(r'#*"""[\s\S]*?"""#*')


def imports(directory: pathlib.Path) -> set[str]:
    found = set()
    for path in directory.rglob("*.swift"):
        found |= set(IMPORT.findall(STRING_LITERAL.sub("", path.read_text())))
    return found - TOOLCHAIN


def targets() -> list[dict]:
    seen, all_targets = set(), []
    for fuzz in (False, True):
        for target in manifest(fuzz)["targets"]:
            if target["name"] not in seen:
                seen.add(target["name"])
                all_targets.append(target)
    return all_targets


def table(all_targets: list[dict]) -> str:
    rows = ["| Module | Direct dependencies (Package.swift) |", "|---|---|"]
    for target in all_targets:
        if target["type"] not in ("regular", "executable") or str(source_dir(target)).startswith(str(ROOT / "Fuzz")):
            continue
        if target["name"] == "ENSTestSupport":
            continue
        deps = sorted(dependencies(target), key=str.lower)
        rows.append(f"| `{target['name']}` | {', '.join(f'`{d}`' for d in deps) or 'none'} |")
    return "\n".join(rows)


def main() -> int:
    all_targets = targets()
    if sys.argv[1:2] == ["--table"]:
        print(table(all_targets))
        return 0
    problems = []
    if sys.argv[1:2] == ["--check-doc"]:
        text = (ROOT / sys.argv[2]).read_text()
        if BEGIN not in text or END not in text:
            problems.append(f"{sys.argv[2]} has no module table between {BEGIN} and {END}")
        elif text.split(BEGIN, 1)[1].split(END, 1)[0].strip() != table(all_targets):
            problems.append(f"the module table in {sys.argv[2]} is not Package.swift's; regenerate it with "
                            "scripts/check_manifest.py --table")
    system = {t["name"] for t in all_targets if t["type"] == "system"}
    for target in all_targets:
        if target["type"] == "system":
            continue
        declared = dependencies(target)
        used = imports(source_dir(target))
        for module in sorted(used - declared):
            problems.append(f"{target['name']} imports {module}, which Package.swift does not list as its dependency")
        # A fuzz target's FuzzSupport is linked for its entry point.
        for module in sorted(declared - used - {"FuzzSupport"}):
            kind = "system library" if module in system else "module"
            problems.append(f"{target['name']} lists the {kind} {module} in Package.swift and imports it nowhere")
    if problems:
        print("lint: Package.swift is not the module graph the code has:")
        print("\n".join(problems))
        return 1
    print(f"check_manifest: OK ({len(all_targets)} targets; every import declared, every dependency used)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
