#!/usr/bin/env python3
"""make lint: the Swift sources keep to a line limit and carry no invisible whitespace.

Why a script and not swift-format: the toolchain's swift-format lints against its own
pretty-printed output. Its configuration turns off the syntax rules (the `rules` map),
but the pretty printer's findings (Indentation, AddLines, RemoveLine, Spacing,
TrailingComma, with LineLength and TrailingWhitespace among them) are not rules and
cannot be turned off one by one ("Configuration contains an unrecognized rule"), so
a line-length check with it means taking its whole layout (thousands of lines here).
This checks only what we want:

- no line longer than MAX_COLUMNS characters (characters, not UTF-8 bytes);
- no trailing whitespace, and no tab characters anywhere;
- the file ends with exactly one newline.

Reads every .swift file under ROOTS (skipping .build directories). Prints one
`path:line: problem` per finding and exits 1 if any.
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

MAX_COLUMNS = 150
ROOTS = ("Sources", "Tests", "clients/ENSKit/Sources", "clients/ENSKit/Tests", "Fuzz/Targets")


def swift_files():
    for top in ROOTS:
        for path in sorted((ROOT / top).rglob("*.swift")):
            relative = path.relative_to(ROOT)
            if ".build" in relative.parts:
                continue
            yield relative.as_posix(), path


def problems_in(name, text):
    problems = []
    lines = text.split("\n")
    for number, line in enumerate(lines[:-1] if text.endswith("\n") else lines, start=1):
        if len(line) > MAX_COLUMNS:
            problems.append(f"{name}:{number}: {len(line)} columns (the limit is {MAX_COLUMNS})")
        if line != line.rstrip(" \t\r\f\v"):
            problems.append(f"{name}:{number}: trailing whitespace")
        if "\t" in line:
            problems.append(f"{name}:{number}: a tab character")
    if not text.endswith("\n"):
        problems.append(f"{name}:{len(lines)}: no newline at the end of the file")
    elif text.endswith("\n\n") or text == "\n":
        problems.append(f"{name}:{len(lines) - 1}: blank lines at the end of the file")
    return problems


def main():
    problems, count = [], 0
    for name, path in swift_files():
        count += 1
        problems += problems_in(name, path.read_text(encoding="utf-8"))
    if problems:
        print(f"lint: Swift lines over {MAX_COLUMNS} columns, trailing whitespace, tabs, or a file's end:")
        print("\n".join(problems))
        return 1
    print(f"check_format: OK ({count} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
