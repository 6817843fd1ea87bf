# Copyright: sglang-lxc contributors
# Apache-2.0
"""Check a configured sgl-kernel build before anything compiles: which nvcc commands it holds,
for which GPU architectures, and that these are only the asked ones.

Reads the Ninja build file CMake generated (``build.ninja``): every build statement whose rule
runs nvcc, with the flags CMake put on it. Counts the nvcc commands and the compiles (one per
``-gencode``/``--generate-code`` clause: nvcc runs the device compiler once for each), and fails
when a command names another architecture, or none (nvcc's own default), naming the output and
the CMake file and line where that architecture is written.

Stdlib only: the role's build script runs it on the target with the venv's Python, as
``python3 sgl_kernel_configured.py --build-dir B --allow sm_120a --search SRC ...``, between
CMake's configure and the first compile. Unit-tested in tests/unit/sglang/test_kernel_archs.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys

CLAUSE = re.compile(
    r"(?:-gencode[= ]|--generate-code[= ])(?:arch=)?(?P<arch>compute_\w+|sm_\w+)"
    r"(?:,code=(?P<code>\[[^\]]*\]|[\w,]+))?"
)
ARCH_FLAG = re.compile(r"(?:^|\s)(?:-arch|--gpu-architecture)[= ](?P<arch>\S+)")


def _unescape(value: str) -> str:
    return re.sub(r"\$([ :$])", r"\1", value)


def parse_ninja(text: str) -> tuple[dict[str, str], list[dict]]:
    """(rule name -> command, build statements with outputs, rule and variables)."""
    text = re.sub(r"\$\n[ \t]*", "", text)  # line continuations
    rules: dict[str, str] = {}
    builds: list[dict] = []
    current: dict | None = None
    rule_name = None
    for line in text.split("\n"):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith((" ", "\t")):
            key, _eq, value = line.strip().partition("=")
            key, value = key.strip(), value.strip()
            if rule_name is not None and key == "command":
                rules[rule_name] = value
            elif current is not None:
                current["vars"][key] = value
            continue
        rule_name, current = None, None
        if line.startswith("rule "):
            rule_name = line[5:].strip()
        elif line.startswith("build "):
            head, _sep, rest = line[6:].partition(": ")
            if not rest:  # an output path holding ': ' is escaped as '$:'
                head, _sep, rest = line[6:].partition(":")
            outputs = head.split("|")[0].split()
            rule = rest.split()[0] if rest.split() else ""
            ins = rest.split()[1:]
            current = {"outputs": [_unescape(o) for o in outputs], "rule": rule, "inputs": ins,
                       "vars": {}}  # fmt: skip
            builds.append(current)
    return rules, builds


def _expand(command: str, variables: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        return variables.get(name, "")

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", sub, command)


def archs_of(command: str) -> list[str]:
    """The compiles of one nvcc command: 'sm_120a', 'compute_90' (PTX only), ... in order."""
    found = []
    for m in CLAUSE.finditer(command):
        code = (m.group("code") or "").strip("[]")
        real = [c for c in code.split(",") if c.startswith("sm_")]
        name = real[0] if real else (code.split(",")[0] if code else m.group("arch"))
        found.append(name)
    for m in ARCH_FLAG.finditer(command):
        found.append(m.group("arch").replace("compute_", "sm_"))
    return list(dict.fromkeys(found))


def nvcc_commands(rules: dict[str, str], builds: list[dict]) -> list[dict]:
    """Each build statement that runs nvcc to compile (-c) or device-link (-dlink)."""
    out = []
    for build in builds:
        rule = rules.get(build["rule"], "")
        if "nvcc" not in rule:
            continue
        variables = {**build["vars"], "in": " ".join(build["inputs"]),
                     "out": " ".join(build["outputs"])}  # fmt: skip
        command = _expand(rule, variables)
        words = shlex.split(command, posix=True) if command.count('"') % 2 == 0 else command.split()
        if not any(w.endswith("nvcc") for w in words):
            continue
        kind = "dlink" if ("-dlink" in words or "--device-link" in words) else "compile"
        if kind == "compile" and "-c" not in words:
            continue
        out.append({"output": build["outputs"][0], "kind": kind, "archs": archs_of(command)})
    return out


def where_written(arch: str, search: list[str], limit: int = 3) -> list[str]:
    """'file:line' of CMake files under the search folders that name this architecture."""
    number = re.sub(r"^(sm|compute)_", "", arch)
    pattern = re.compile(
        rf"(compute_{number}\b|sm_{number}\b|ARCHITECTURES\b[^\n]*\b{re.escape(number)}\b)"
    )
    hits: list[str] = []
    for root in search:
        for dirpath, dirnames, filenames in os.walk(root):
            if os.path.isfile(os.path.join(dirpath, "CMakeCache.txt")):
                dirnames[:] = []  # a build folder: its cache only (the flags given to CMake)
            dirnames[:] = sorted(d for d in dirnames if d not in (".git", "build", "_deps"))
            for name in sorted(filenames):
                if not (name in ("CMakeLists.txt", "CMakeCache.txt") or name.endswith(".cmake")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as handle:
                    for i, line in enumerate(handle, 1):
                        if line.lstrip().startswith("#"):
                            continue
                        if pattern.search(line):
                            hits.append(f"{path}:{i}")
                            if len(hits) >= limit:
                                return hits
    return hits


def read_ninja(build_dir: str, name: str = "build.ninja") -> str:
    """build.ninja with the files it includes (CMake keeps the rules in CMakeFiles/rules.ninja)."""
    with open(os.path.join(build_dir, name), encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    parts = []
    for line in text.split("\n"):
        m = re.match(r"^(?:include|subninja)\s+(\S+)\s*$", line)
        parts.append(read_ninja(build_dir, m.group(1)) if m else line)
    return "\n".join(parts)


def check(build_dir: str, allow: list[str], search: list[str]) -> dict:
    """Counts and problems of the configured build in build_dir."""
    rules, builds = parse_ninja(read_ninja(build_dir))
    commands = nvcc_commands(rules, builds)
    compiles = [c for c in commands if c["kind"] == "compile"]
    allowed = set(allow)
    problems = []
    per_arch: dict[str, int] = {}
    for cmd in commands:
        for arch in cmd["archs"]:
            per_arch[arch] = per_arch.get(arch, 0) + (cmd["kind"] == "compile")
        wrong = [a for a in cmd["archs"] if a not in allowed]
        if not cmd["archs"]:
            problems.append(f"{cmd['output']}: nvcc without an architecture flag (nvcc's default)")
        for arch in wrong:
            look = where_written(arch, [build_dir, *search]) or [
                "(no CMake file names it: CMAKE_CUDA_ARCHITECTURES?)"
            ]
            problems.append(f"{cmd['output']}: {arch} (allowed: {', '.join(sorted(allowed))}); "
                            f"look at {', '.join(look)}")  # fmt: skip
    return {
        "nvcc_commands": len(compiles),
        "compiles": sum(len(c["archs"]) for c in compiles),
        "device_links": len(commands) - len(compiles),
        "per_arch": dict(sorted(per_arch.items())),
        # what the build's progress counts (sglang_kernel_build reads them from .ninja_log)
        "compile_outputs": [c["output"] for c in compiles],
        "allowed": sorted(allowed),
        "problems": problems,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--allow", action="append", default=[], help="e.g. sm_120a")
    parser.add_argument("--search", action="append", default=[], help="CMake source folders")
    parser.add_argument("--record", help="write the counts as JSON here")
    opts = parser.parse_args(argv)
    result = check(opts.build_dir, opts.allow, opts.search)
    if opts.record:
        with open(opts.record, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=1)
    print(
        f"sgl-kernel configured: {result['nvcc_commands']} nvcc commands, {result['compiles']} "
        f"compiles, {result['device_links']} device links, per architecture {result['per_arch']}"
    )
    if result["problems"]:
        print(
            f"sgl-kernel configured: {len(result['problems'])} nvcc commands build "
            "architectures that were not asked for; nothing compiled:",
            file=sys.stderr,
        )
        for line in result["problems"][:20]:
            print(f"  {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
