# Copyright: sglang-lxc contributors
# Apache-2.0
"""Read sgl-kernel's CMake files: the commands, and the FetchContent pins they declare.

sgl-kernel (sglang repository, ``sgl-kernel/``) fetches its third-party sources at configure
time with ``FetchContent_Declare``; a dependency it builds with ``add_subdirectory`` (mscclpp)
declares more of its own. The role reads those pins from the tree itself, never from a list of
ours, brings each into the controller's source cache and hands CMake the folders
(``FETCHCONTENT_SOURCE_DIR_<NAME>``, ``FETCHCONTENT_FULLY_DISCONNECTED=ON``), as distribution
packagers do. Pure Python, no Ansible: unit-tested in tests/unit/sglang/test_kernel_sources.py.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field

# ------------------------------------------------------------------------------ the CMake reader


class CMakeReadError(ValueError):
    """A file this reader cannot follow; the message names the file and line."""


@dataclass
class Arg:
    raw: str  # as written, quotes included
    value: str  # without quotes
    start: int  # offsets in the file's text
    end: int
    line: int
    quoted: bool


@dataclass
class Command:
    name: str  # lower case, as CMake compares command names
    args: list[Arg]
    start: int  # offset of the command's name
    end: int  # offset after its closing parenthesis
    line: int
    end_line: int

    def values(self) -> list[str]:
        return [a.value for a in self.args]


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKET_OPEN = re.compile(r"\[(=*)\[")


def _bracket_end(text: str, pos: int) -> tuple[int, int] | None:
    """(end of a bracket argument starting at pos, length of its opener), or None."""
    m = _BRACKET_OPEN.match(text, pos)
    if not m:
        return None
    close = "]" + m.group(1) + "]"
    end = text.find(close, m.end())
    if end < 0:
        return None
    return end + len(close), len(m.group(0))


def _after_comment(text: str, pos: int) -> int:
    """Where the comment that starts at ``pos`` (a '#') ends: a bracket comment at its closing
    bracket, a line comment after its newline."""
    bracket = _bracket_end(text, pos + 1)
    if bracket:
        return bracket[0]
    nl = text.find("\n", pos)
    return len(text) if nl < 0 else nl + 1


def parse_commands(text: str, filename: str = "<cmake>") -> list[Command]:
    """Every command invocation of a CMake file, in order (comments skipped)."""
    commands: list[Command] = []
    pos, n = 0, len(text)
    line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def line_of(offset: int) -> int:
        return bisect.bisect_right(line_starts, offset)

    while pos < n:
        c = text[pos]
        if c in " \t\r\n":
            pos += 1
            continue
        if c == "#":
            pos = _after_comment(text, pos)
            continue
        m = _IDENT.match(text, pos)
        if not m:
            raise CMakeReadError(f"{filename}:{line_of(pos)}: unexpected {c!r} outside a command")
        name, start = m.group(0), pos
        pos = m.end()
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n or text[pos] != "(":
            raise CMakeReadError(f"{filename}:{line_of(start)}: '{name}' is not followed by '('")
        pos += 1
        args: list[Arg] = []
        depth = 0
        while True:
            if pos >= n:
                raise CMakeReadError(f"{filename}:{line_of(start)}: '{name}(' is never closed")
            c = text[pos]
            if c in " \t\r\n":
                pos += 1
            elif c == "#":
                pos = _after_comment(text, pos)
            elif c == "(":
                depth += 1
                args.append(Arg("(", "(", pos, pos + 1, line_of(pos), False))
                pos += 1
            elif c == ")":
                if depth == 0:
                    pos += 1
                    break
                depth -= 1
                args.append(Arg(")", ")", pos, pos + 1, line_of(pos), False))
                pos += 1
            elif c == '"':
                end = pos + 1
                while end < n and text[end] != '"':
                    end += 2 if text[end] == "\\" else 1
                if end >= n:
                    raise CMakeReadError(f"{filename}:{line_of(pos)}: a quoted argument never ends")
                args.append(
                    Arg(text[pos : end + 1], text[pos + 1 : end], pos, end + 1, line_of(pos), True)
                )
                pos = end + 1
            elif c == "[" and _bracket_end(text, pos):
                end, opener = _bracket_end(text, pos)
                raw = text[pos:end]
                args.append(Arg(raw, raw[opener:-opener], pos, end, line_of(pos), True))
                pos = end
            else:
                end = pos
                while end < n and text[end] not in ' \t\r\n()#"':
                    if text[end] == "\\":
                        end += 1
                    elif text[end] == "$" and text.startswith("$<", end):
                        # generator expressions may hold spaces only when quoted; keep going
                        pass
                    end += 1
                raw = text[pos:end]
                args.append(Arg(raw, raw, pos, end, line_of(pos), False))
                pos = end
        commands.append(Command(name.lower(), args, start, pos, line_of(start), line_of(pos - 1)))
    return commands


# ------------------------------------------------------------------------------ the pins

# Folders of a dependency whose CMake files are not part of the build the role configures.
SKIP_DIRS = frozenset(
    {"test", "tests", "examples", "example", "docs", "benchmark", "benchmarks", ".git"}
)

_GITHUB_RELEASE = re.compile(
    r"^https://github\.com/(?P<repo>[^/]+/[^/]+)/(?:releases/download/(?P<tag>[^/]+)/[^/]+"
    r"|archive/(?:refs/tags/)?(?P<tag2>.+?)\.(?:zip|tar\.gz|tar\.xz|tgz))$"
)


@dataclass
class Pin:
    """One FetchContent_Declare: where its source comes from, and where it was read."""

    name: str
    file: str  # path relative to the tree it was read in
    line: int
    repository: str = ""  # git URL
    ref: str = ""  # GIT_TAG: a commit, a tag or a branch
    url: str = ""  # URL form (an archive)
    parent: str = ""  # the dependency whose tree declared it ("" for sgl-kernel itself)
    subdirectory: bool = False  # built with add_subdirectory (its own pins are read too)
    extra: dict = field(default_factory=dict)

    @property
    def cmake_name(self) -> str:
        """FetchContent's variable suffix: FETCHCONTENT_SOURCE_DIR_<this>."""
        return self.name.upper()

    @property
    def git(self) -> tuple[str, str]:
        """(git repository, ref) to clone, also for a GitHub release or tag archive URL."""
        if self.repository:
            return self.repository, self.ref
        m = _GITHUB_RELEASE.match(self.url)
        if m:
            return f"https://github.com/{m.group('repo')}", m.group("tag") or m.group("tag2")
        return "", ""

    def where(self) -> str:
        return f"{self.parent + ': ' if self.parent else ''}{self.file}:{self.line}"


def cmake_files(root: str, skip_dirs: frozenset = SKIP_DIRS) -> list[str]:
    """CMakeLists.txt and *.cmake files below root (relative paths, sorted)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs and d != "build")
        for name in filenames:
            if name == "CMakeLists.txt" or name.endswith(".cmake"):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found)


def _keywords(values: list[str], known: set[str]) -> dict[str, str]:
    out, key = {}, None
    for v in values:
        if v in known:
            key = v
            out.setdefault(key, "")
        elif key and not out[key]:
            out[key] = v
    return out


_DECLARE_KEYS = {
    "GIT_REPOSITORY", "GIT_TAG", "GIT_SHALLOW", "GIT_SUBMODULES", "GIT_PROGRESS", "URL",
    "URL_HASH", "URL_MD5", "SOURCE_SUBDIR", "SOURCE_DIR", "BINARY_DIR", "PATCH_COMMAND",
    "UPDATE_DISCONNECTED", "EXCLUDE_FROM_ALL", "SYSTEM", "FIND_PACKAGE_ARGS",
    "OVERRIDE_FIND_PACKAGE", "DOWNLOAD_EXTRACT_TIMESTAMP",
}  # fmt: skip


def read_pins(root: str, files: list[str] | None = None, parent: str = "") -> list[Pin]:
    """The FetchContent_Declare pins of these files (default: every CMake file below root).

    A pin that uses a variable (``GIT_TAG ${X}``) is refused with its file and line: the role
    cannot know what CMake would make of it.
    """
    pins: list[Pin] = []
    subdirs: set[str] = set()
    for rel in files if files is not None else cmake_files(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        for cmd in parse_commands(text, rel):
            if cmd.name == "add_subdirectory" and cmd.args:
                m = re.match(r"^\$\{(.+)_SOURCE_DIR\}", cmd.args[0].value)
                if m:
                    subdirs.add(m.group(1).lower())
            if cmd.name != "fetchcontent_declare" or not cmd.args:
                continue
            values = cmd.values()
            keys = _keywords(values[1:], _DECLARE_KEYS)
            pin = Pin(
                name=values[0],
                file=rel,
                line=cmd.line,
                repository=keys.get("GIT_REPOSITORY", ""),
                ref=keys.get("GIT_TAG", ""),
                url=keys.get("URL", ""),
                parent=parent,
            )
            for v in (pin.name, pin.repository, pin.ref, pin.url):
                if "${" in v:
                    raise CMakeReadError(
                        f"{pin.where()}: FetchContent_Declare({pin.name}) uses a variable ({v}); "
                        "the role reads pins as written"
                    )
            if not (pin.repository and pin.ref) and not pin.url:
                raise CMakeReadError(
                    f"{pin.where()}: FetchContent_Declare({pin.name}) has neither GIT_REPOSITORY "
                    "with GIT_TAG nor URL"
                )
            pins.append(pin)
    for pin in pins:
        pin.subdirectory = pin.name.lower() in subdirs
        # FetchContent_MakeAvailable builds the dependency with add_subdirectory as well.
    made_available = _made_available(root, files)
    for pin in pins:
        if pin.name.lower() in made_available:
            pin.subdirectory = True
    return pins


def _made_available(root: str, files: list[str] | None) -> set[str]:
    names: set[str] = set()
    for rel in files if files is not None else cmake_files(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as handle:
            for cmd in parse_commands(handle.read(), rel):
                if cmd.name == "fetchcontent_makeavailable":
                    names.update(v.lower() for v in cmd.values())
    return names


def fetchcontent_args(folders: dict[str, str]) -> list[str]:
    """CMake arguments that point FetchContent at local folders and keep it offline."""
    args = ["-DFETCHCONTENT_FULLY_DISCONNECTED=ON"]
    for name in sorted(folders):
        args.append(f"-DFETCHCONTENT_SOURCE_DIR_{name.upper()}={folders[name]}")
    return args


def safe_name(text: str) -> str:
    """A folder-name-safe rendering of a pin's name or ref."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def build_files(root: str) -> list[str]:
    """The tree's CMake files that its build reads: CMakeLists.txt and what it include()s.

    A file the transformation stopped including (FlashMLA's) is not read, so its pins are not
    needed.
    """
    files = ["CMakeLists.txt"]
    queue = ["CMakeLists.txt"]
    while queue:
        rel = queue.pop()
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as handle:
            cmds = parse_commands(handle.read(), rel)
        for cmd in cmds:
            if cmd.name != "include" or not cmd.args:
                continue
            path = cmd.args[0].value
            for var in ("${CMAKE_CURRENT_LIST_DIR}/", "${CMAKE_CURRENT_SOURCE_DIR}/",
                        "${PROJECT_SOURCE_DIR}/", "${CMAKE_SOURCE_DIR}/"):  # fmt: skip
                if path.startswith(var):
                    path = os.path.normpath(os.path.join(os.path.dirname(rel), path[len(var) :]))
            if os.path.isfile(os.path.join(root, path)) and path not in files:
                files.append(path)
                queue.append(path)
    return files
