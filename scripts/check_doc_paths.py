#!/usr/bin/env python3
"""make lint: the repository paths the docs name exist, and the types the docs and the
code's comments name in backticks.

Reads docs/*.md and README.md. Every token in backticks (an inline code span or a
fenced code block) that starts with one of the repository's top-level directories
(TOP_LEVEL) must exist in the working tree: a trailing `/` names a directory, a `*`
makes it a glob that must match at least one path, and whatever follows a `:`
(`file.swift:12`) or a `#` (an anchor) is ignored.
Every relative Markdown link target, `](path)` or `](path#anchor)`, must exist too,
relative to the file it is in (the anchor itself is not checked). Paths under var/ and
.build/ are made at run time and are not checked, nor are placeholders such as
`Tests/<Module>Tests`. Prints each missing path with its file and line; exits 1 if any.
"""
import glob
import os
import pathlib
import re
import subprocess
import sys
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The top-level directories a path in backticks may start with (what `ls` shows).
TOP_LEVEL = ("Sources/", "Tests/", "scripts/", "bench/", "docs/", "sql/", "config/", "debian/",
             "deploy/", "apache/", "nginx/", "clients/", "Fuzz/", ".ci/")
# Made when the stack or a build runs, not kept in the tree.
GENERATED = ("var/", ".build/")
# A token with one of these is a placeholder or a pattern, not a path.
PLACEHOLDER = re.compile(r"[<>{}$…]|\.\.\.")

# (file, path) pairs that may name a path that does not exist, each with its reason.
ALLOWED: dict[tuple[str, str], str] = {}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def split_fences(text):
    """The text with fenced code blocks blanked (line numbers kept), and the blocks' lines
    as (line number, line)."""
    lines, fence, fenced = text.split("\n"), None, []
    for index, line in enumerate(lines):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
            lines[index] = ""
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            else:
                fenced.append((index + 1, line))
            lines[index] = ""
    return "\n".join(lines), fenced


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def exists(path):
    """Whether a repository-relative path (a directory if it ends in /, a glob if it has *) exists."""
    if path.startswith(("../", "/")):  # outside the repository
        return False
    if "*" in path:
        return bool(glob.glob(str(ROOT / path), recursive=True))
    target = ROOT / path
    return target.is_dir() if path.endswith("/") else target.exists()


def repository_paths(code):
    """(offset, path) for each word of a piece of code that names a repository path."""
    for token in re.finditer(r"\S+", code):
        word = token.group(0).split("=")[-1].strip("\"'(),;")
        word = re.split(r"[:#]", word, maxsplit=1)[0].rstrip(".")
        word = word[2:] if word.startswith("./") else word
        if word.startswith(TOP_LEVEL) and not PLACEHOLDER.search(word):
            yield token.start(), word


def code_paths(text, fenced):
    """(line, path) for each repository path in an inline code span or a fenced block."""
    for span in CODE_SPAN.finditer(text):
        body = span.group(2)
        if "\n\n" in body:  # a code span does not cross paragraphs: an unpaired backtick
            continue
        for offset, word in repository_paths(body):
            yield line_of(text, span.start(2) + offset), word
    for number, line in fenced:
        for _, word in repository_paths(line):
            yield number, word


def link_paths(text, source):
    """(line, repository-relative path) for each relative link target."""
    plain = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    for link in LINK.finditer(plain):
        target = link.group(1)
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        target = urllib.parse.unquote(re.split(r"[#?]", target, maxsplit=1)[0])
        resolved = (source.parent / target).resolve()
        relative = pathlib.Path(os.path.relpath(resolved, ROOT)).as_posix()
        if resolved.is_dir() and not relative.endswith("/"):
            relative += "/"
        yield line_of(plain, link.start()), relative


# Type names the docs and comments take from elsewhere (the Swift standard library's,
# Apple's, Android's, Apache's, CryptoKit's, libxml2's, AsyncHTTPClient's): not ours to
# find in the tree.
EXTERNAL_NAMES = {"AfterFirstUnlockThisDeviceOnly", "BGAppRefreshTask", "FirebaseMessagingService",
                  "RemoteIPInternalProxy", "SecKeyEncrypt", "SecKeyCopyExternalRepresentation", "SharedSecret", "NSData",
                  "NOENT", "HTTPClientError", "Hasher"}
# A backticked UpperCamelCase name (a type, optionally with a member or call after it).
TYPE_NAME = re.compile(r"`([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)(?:\.[A-Za-z0-9_.]+)?(?:\([^`]*\))?`")


def known_names():
    """Every identifier in the tracked code, tests, SQL and scripts (build directories and
    other untracked files do not count), and every tracked file's and folder's name."""
    tracked = subprocess.run(["git", "ls-files", "Sources", "Tests", "clients/ENSKit/Sources", "clients/ENSKit/Tests", "Fuzz",
                              "sql", "scripts", "bench", "dovecot", "nginx", "apache", "deploy", "debian"],
                             cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    words = set()
    for name in tracked:
        path = ROOT / name
        words |= {part.split(".")[0] for part in pathlib.PurePosixPath(name).parts}
        if path.suffix in (".swift", ".sql", ".py", ".sh", ".lua", ".conf", ".in", ".h", ".service", ".socket", ".timer", ""):
            text = path.read_text(encoding="utf-8", errors="ignore")
            if path.suffix == ".swift":  # the code, not its comments: those are what is checked
                text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//"))
            words |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    return words


def type_names(files, known):
    """Problems: backticked type names in the docs and in Swift doc comments that the tree lacks."""
    problems = []
    comments = sorted(ROOT.glob("Sources/**/*.swift")) + sorted(ROOT.glob("clients/ENSKit/Sources/**/*.swift"))
    for source in files + comments:
        name = source.relative_to(ROOT).as_posix()
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            if source.suffix == ".swift" and not line.lstrip().startswith("//"):
                continue
            for match in TYPE_NAME.finditer(line):
                word = match.group(1)
                if word not in known and word not in EXTERNAL_NAMES:
                    problems.append(f"{name}:{number}: `{word}` names nothing in the tree")
    return problems


def main():
    files = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    stale_types = type_names(files, known_names())
    if stale_types:
        print("lint: docs and comments name types that are not in the tree (renamed? say the new name):")
        print("\n".join(stale_types))
        return 1
    missing, checked, allowed_used = [], 0, set()
    for source in files:
        name = source.relative_to(ROOT).as_posix()
        text, fenced = split_fences(source.read_text(encoding="utf-8"))
        for kind, found in (("path", code_paths(text, fenced)), ("link", link_paths(text, source))):
            for line, path in found:
                if path.startswith(GENERATED) or path.rstrip("/") in ("var", ".build"):
                    continue
                checked += 1
                if exists(path):
                    continue
                if (name, path) in ALLOWED:
                    allowed_used.add((name, path))
                    continue
                problem = "leaves the repository" if path.startswith("../") else "does not exist"
                missing.append((name, line, f"{name}:{line}: {kind} {path} {problem}"))
    for entry in sorted(set(ALLOWED) - allowed_used):  # a note, so that fixing the doc passes
        print(f"check_doc_paths: note: {entry[0]} no longer names {entry[1]}; "
              "its ALLOWED entry can go")
    if missing:
        print("lint: docs name paths that are not in the tree:")
        print("\n".join(message for _, _, message in sorted(missing)))
        return 1
    print(f"check_doc_paths: OK ({checked} paths and links in {len(files)} files; backticked type names in them and in comments)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
