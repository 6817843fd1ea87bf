# Copyright: sglang-lxc contributors
# Apache-2.0
"""Make a build copy of sgl-kernel build for the asked CUDA architectures alone.

sgl-kernel ignores TORCH_CUDA_ARCH_LIST and CMAKE_CUDA_ARCHITECTURES: after
``find_package(Torch)`` it clears torch's gencodes and lists its own in flag variables
(``SGL_KERNEL_CUDA_FLAGS``), some behind CUDA version checks; it forces FA3 on for CUDA >= 12.4
whatever ``-DSGL_KERNEL_ENABLE_FA3=OFF`` says; it builds every source twice (an sm90 copy loaded
only on capability 9.0, and the copy SM100/SM120 load); and a dependency it adds with
``add_subdirectory`` (mscclpp) sets its own architectures. This module rewrites the CMake files
of a *build copy* (never the source cache) so that:

- each flag variable that a kept target compiles with lists exactly the asked gencodes
  (the tree's own form of each: ``12.0`` becomes ``compute_120a,code=sm_120a`` when that is what
  the tree builds), every other gencode removed;
- a ``set(<option> ON)`` that would override an option the role passes as OFF is commented out;
- targets that cannot use the asked architectures are commented out, each with its reason: a
  target whose flags list gencodes but none of the asked ones (FA3 ``flash_ops``, FlashMLA),
  the sm90 copy (``*_sm90_build``), and a CMake file included only for such targets is not
  included at all (so its FetchContent pins are not needed);
- the targets of a dependency added with ``add_subdirectory`` get ``CUDA_ARCHITECTURES`` of the
  asked architectures (our own function, written into the copy).

Anything it does not recognise (a gencode in another form, a target it cannot place) raises
TransformError naming the file and line to look at. Pure Python, unit-tested on
tests/fixtures/sgl_kernel_fixture (tests/unit/sglang/test_kernel_archs.py).
"""

from __future__ import annotations

import os
import re

try:  # the controller imports it as a sibling (plugins loaded by path)
    from sgl_kernel_cmake import Command, parse_commands
except ImportError:  # pragma: no cover - loaded as part of a package
    from .sgl_kernel_cmake import Command, parse_commands


class TransformError(ValueError):
    """The tree no longer has the shape the transformation knows; names file and line."""


GENCODE = re.compile(r"^-gencode=arch=compute_(?P<arch>\d+[a-z]?),code=sm_(?P<code>\d+[a-z]?)$")
# Any other way of naming a GPU architecture in a flag list: refused, with file and line.
ARCH_LIKE = re.compile(
    r"(-gencode|--generate-code|--gpu-architecture|--gpu-code|(?<![A-Za-z_])-arch[= ]|"
    r"(?<![A-Za-z_])-code[= ]|compute_\d|(?<![A-Za-z_])sm_\d)"
)
TARGET_COMMANDS = {"python_add_library", "add_library", "add_executable", "cuda_add_library"}
# Commands whose first argument is a target: commented out with the target.
TARGET_FIRST = {
    "target_compile_options", "target_compile_definitions", "target_include_directories",
    "target_link_libraries", "target_link_options", "target_sources", "target_compile_features",
    "set_target_properties", "add_dependencies",
}  # fmt: skip
MARK = "#sglang-lxc# "
HELPER = "sglang-lxc-cuda-archs.cmake"


def arch_number(arch: str) -> str:
    """'12.0' -> '120', '9.0a' -> '90a', '10.0f' -> '100f'."""
    m = re.match(r"^(\d+)\.(\d)([af]?)$", str(arch).strip())
    if not m:
        raise TransformError(f"sglang_kernel_cuda_archs: {arch!r} is not like '12.0' or '12.0a'")
    return f"{m.group(1)}{m.group(2)}{m.group(3)}"


def gencode(arch: str) -> str:
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def _read(root: str, rel: str) -> str:
    with open(os.path.join(root, rel), encoding="utf-8") as handle:
        return handle.read()


def _tree_files(root: str) -> list[str]:
    files = ["CMakeLists.txt"] if os.path.isfile(os.path.join(root, "CMakeLists.txt")) else []
    cmake_dir = os.path.join(root, "cmake")
    if os.path.isdir(cmake_dir):
        files += sorted(f"cmake/{n}" for n in os.listdir(cmake_dir) if n.endswith(".cmake"))
    return files


def choose_archs(asked: list[str], available: dict[str, tuple[str, int]]) -> list[str]:
    """The tree's gencode archs for the asked ones: exact, else the arch-specific variant."""
    chosen = []
    for arch in asked:
        number = arch_number(arch)
        if number in available:
            chosen.append(number)
            continue
        variants = sorted(a for a in available if re.sub(r"[a-z]$", "", a) == number)
        if not variants:
            where = min(available.values(), key=lambda v: (v[0], v[1])) if available else ("?", 0)
            raise TransformError(
                f"{where[0]}:{where[1]}: the tree builds no gencode for {arch} (sm_{number}); "
                f"it has {', '.join('sm_' + a for a in sorted(available)) or 'none'}"
            )
        chosen.append(variants[0])  # 'a' before 'f'
    return list(dict.fromkeys(chosen))


def transform(root: str, archs: list[str], options_off: list[str] = ()) -> dict:
    """Rewrite the build copy at root; return the record of what was done and left out."""
    files = _tree_files(root)
    if "CMakeLists.txt" not in files:
        raise TransformError(f"{root}: no CMakeLists.txt")
    parsed = {rel: (_read(root, rel), parse_commands(_read(root, rel), rel)) for rel in files}

    # 1. flag variables and their gencodes
    flag_vars: dict[str, list[tuple[str, Command]]] = {}  # var -> [(file, set/list command)]
    available: dict[str, tuple[str, int]] = {}
    for rel, (_text, cmds) in parsed.items():
        for cmd in cmds:
            values = cmd.values()
            if cmd.name == "set" and values:
                var, items = values[0], cmd.args[1:]
            elif cmd.name == "list" and len(values) > 1 and values[0].upper() == "APPEND":
                var, items = values[1], cmd.args[2:]
            else:
                continue
            if var in (
                "CMAKE_CUDA_ARCHITECTURES",
                "CUDA_ARCHITECTURES",
                "TORCH_CUDA_ARCH_LIST",
            ) and [v.upper() for v in values[1:]] != ["OFF"]:
                raise TransformError(
                    f"{rel}:{cmd.line}: the tree sets {var}; the transformation only knows "
                    "gencodes in flag lists"
                )
            for arg in items:
                m = GENCODE.match(arg.value)
                if m:
                    if m.group("arch") != m.group("code"):
                        raise TransformError(
                            f"{rel}:{arg.line}: {arg.value}: virtual and real architecture "
                            "differ; the transformation only knows compute_X,code=sm_X"
                        )
                    flag_vars.setdefault(var, []).append((rel, cmd))
                    available.setdefault(m.group("arch"), (rel, arg.line))
                elif ARCH_LIKE.search(arg.value):
                    raise TransformError(
                        f"{rel}:{arg.line}: {arg.value!r} names an architecture in a form the "
                        "transformation does not know"
                    )
    if not flag_vars:
        raise TransformError(
            "CMakeLists.txt:1: no -gencode=arch=compute_X,code=sm_X flag list found"
        )
    wanted = choose_archs(list(archs), available)

    # 2. targets, their flag variables, their files
    targets: dict[str, dict] = {}
    for rel, (_text, cmds) in parsed.items():
        for cmd in cmds:
            values = cmd.values()
            if cmd.name in TARGET_COMMANDS and values:
                targets.setdefault(
                    values[0], {"file": rel, "line": cmd.line, "vars": set(), "out": ""}
                )
    for _text, cmds in parsed.values():
        for cmd in cmds:
            values = cmd.values()
            if not values or values[0] not in targets:
                continue
            t = targets[values[0]]
            if cmd.name == "target_compile_options":
                for v in values[1:]:
                    t["vars"].update(x for x in re.findall(r"\$\{(\w+)\}", v) if x in flag_vars)
            if cmd.name == "set_target_properties" and "LIBRARY_OUTPUT_DIRECTORY" in values:
                t["out"] = values[values.index("LIBRARY_OUTPUT_DIRECTORY") + 1]

    def var_archs(var: str) -> set[str]:
        return {
            GENCODE.match(a.value).group("arch")
            for _line, cmd in flag_vars[var]
            for a in cmd.args
            if GENCODE.match(a.value)
        }

    left_out: dict[str, str] = {}
    for name, t in targets.items():
        if name.endswith("_sm90_build") or t["out"].rstrip("/").endswith("/sm90"):
            left_out[name] = "the sm90 copy: sgl_kernel loads it only on compute capability 9.0"
        elif t["vars"] and not any(set(wanted) & var_archs(v) for v in t["vars"]):
            have = sorted(set().union(*(var_archs(v) for v in t["vars"])))
            left_out[name] = f"builds only {', '.join('sm_' + a for a in have)}"
    kept_vars = set().union(*(t["vars"] for n, t in targets.items() if n not in left_out))
    if not any(n not in left_out for n, t in targets.items() if t["vars"]):
        raise TransformError(
            "CMakeLists.txt:1: every CUDA target would be left out; nothing to build for "
            + ", ".join(archs)
        )

    # 3. the edits, per file: (start, end, replacement)
    edits: dict[str, list[tuple[int, int, str]]] = {rel: [] for rel in parsed}
    record_edits: list[dict] = []
    commented: dict[str, list[Command]] = {rel: [] for rel in parsed}
    first_set: set[str] = set()
    for rel, (_text, cmds) in parsed.items():
        for cmd in cmds:
            values = cmd.values()
            # flag lists of kept targets
            var = None
            if cmd.name == "set" and values:
                var = values[0]
            elif cmd.name == "list" and len(values) > 1 and values[0].upper() == "APPEND":
                var = values[1]
            if var in kept_vars and any(GENCODE.match(a.value) for a in cmd.args):
                gens = [a for a in cmd.args if GENCODE.match(a.value)]
                for i, arg in enumerate(gens):
                    if i == 0 and cmd.name == "set" and var not in first_set:
                        first_set.add(var)
                        new = " ".join(f'"{gencode(a)}"' for a in wanted)
                        edits[rel].append((arg.start, arg.end, new))
                        record_edits.append(
                            {"file": rel, "line": arg.line, "what": f"{var}: {arg.value} -> {new}"}
                        )
                    else:
                        edits[rel].append((arg.start, arg.end, ""))
                        record_edits.append(
                            {"file": rel, "line": arg.line, "what": f"{var}: removed {arg.value}"}
                        )
            # set(<option> ON) over an option the role passes OFF
            if (
                cmd.name == "set"
                and len(values) == 2
                and values[0] in options_off
                and values[1].upper() in ("ON", "TRUE", "1", "YES")
            ):
                commented[rel].append(cmd)
                record_edits.append(
                    {
                        "file": rel,
                        "line": cmd.line,
                        "what": f"dropped set({values[0]} {values[1]}): "
                        f"it overrides -D{values[0]}=OFF",
                    }
                )
            # commands of left-out targets
            target = None
            if cmd.name in TARGET_COMMANDS | TARGET_FIRST and values:
                target = values[0]
            elif cmd.name == "install" and len(values) > 1 and values[0] == "TARGETS":
                names = [v for v in values[1:] if v in targets]
                if names and all(n in left_out for n in names):
                    target = names[0]
                elif any(n in left_out for n in names):
                    raise TransformError(
                        f"{rel}:{cmd.line}: install(TARGETS) mixes kept and left-out targets"
                    )
            if target in left_out:
                commented[rel].append(cmd)
    for var in kept_vars:
        if var not in first_set:
            # only list(APPEND) holds gencodes: add the asked ones to its first such command
            rel, cmd = flag_vars[var][0]
            arg = next(a for a in cmd.args if GENCODE.match(a.value))
            new = " ".join(f'"{gencode(a)}"' for a in wanted)
            edits[rel] = [e for e in edits[rel] if e[0] != arg.start] + [(arg.start, arg.end, new)]
            record_edits.append(
                {"file": rel, "line": arg.line, "what": f"{var}: {arg.value} -> {new}"}
            )

    # files included only for left-out targets are not included
    defined_in: dict[str, set[str]] = {}
    for name, t in targets.items():
        defined_in.setdefault(t["file"], set()).add(name)
    skipped_files = [
        rel for rel, names in defined_in.items()
        if rel != "CMakeLists.txt" and names and names <= set(left_out)
    ]  # fmt: skip
    for rel, (_text, cmds) in parsed.items():
        for cmd in cmds:
            if cmd.name == "include" and cmd.args:
                base = os.path.basename(cmd.args[0].value)
                if any(os.path.basename(s) == base for s in skipped_files):
                    commented[rel].append(cmd)
                    record_edits.append(
                        {
                            "file": rel,
                            "line": cmd.line,
                            "what": f"not included: {cmd.args[0].value}",
                        }
                    )

    # dependencies built with add_subdirectory set their own architectures (mscclpp: 80 90): our
    # helper, included after the top-level project() through CMAKE_PROJECT_TOP_LEVEL_INCLUDES,
    # gives every target that has CUDA_ARCHITECTURES the asked ones once all CMake files are read.
    cuda_archs = ";".join(f"{a}-real" for a in wanted)
    record_edits.append(
        {"file": f"cmake/{HELPER}", "line": 1,
         "what": f"CUDA_ARCHITECTURES {cuda_archs} for targets that set their own (dependencies)"}
    )  # fmt: skip

    # 4. apply: commented commands first become line edits
    for rel, cmds in commented.items():
        text = parsed[rel][0]
        for cmd in cmds:
            line_start = text.rfind("\n", 0, cmd.start) + 1
            line_end = text.find("\n", cmd.end)
            line_end = len(text) if line_end < 0 else line_end
            if (
                text[line_start : cmd.start].strip()
                or text[cmd.end : line_end].split("#")[0].strip()
            ):
                raise TransformError(
                    f"{rel}:{cmd.line}: {cmd.name}() shares its line with other code; "
                    "the transformation comments out whole lines"
                )
            block = text[line_start:line_end]
            new = "\n".join(MARK + ln for ln in block.split("\n"))
            edits[rel] = [e for e in edits[rel] if not (line_start <= e[0] < line_end)]
            edits[rel].append((line_start, line_end, new))
        for t, why in left_out.items():
            if targets[t]["file"] == rel:
                record_edits.append(
                    {"file": rel, "line": targets[t]["line"], "what": f"left out {t}: {why}"}
                )
    changed = []
    for rel, file_edits in edits.items():
        if not file_edits:
            continue
        text = parsed[rel][0]
        for start, end, new in sorted(file_edits, key=lambda e: (e[0], e[1]), reverse=True):
            text = text[:start] + new + text[end:]
        # a removed gencode leaves its line empty: the copy keeps the tree's line numbers
        with open(os.path.join(root, rel), "w", encoding="utf-8") as handle:
            handle.write(text)
        changed.append(rel)
    os.makedirs(os.path.join(root, "cmake"), exist_ok=True)
    with open(os.path.join(root, "cmake", HELPER), "w", encoding="utf-8") as handle:
        handle.write(HELPER_TEXT)
    return {
        "archs": [f"sm_{a}" for a in wanted],
        "gencodes": [gencode(a) for a in wanted],
        "left_out": [
            {"target": t, "reason": why, "file": targets[t]["file"], "line": targets[t]["line"]}
            for t, why in sorted(left_out.items())
        ],
        "not_included": sorted(skipped_files),
        "edits": sorted(record_edits, key=lambda e: (e["file"], e["line"])),
        "files": sorted(changed),
        # relative to the build copy; the role prefixes the target's path
        "cmake_args": {
            "CMAKE_PROJECT_TOP_LEVEL_INCLUDES": f"cmake/{HELPER}",
            "SGLANG_LXC_CUDA_ARCHS": cuda_archs,
        },
    }


HELPER_TEXT = """\
# Written by sglang-lxc into the build copy (never into the source cache), included after the
# top-level project() (CMAKE_PROJECT_TOP_LEVEL_INCLUDES). A dependency built with
# add_subdirectory (mscclpp) sets CMAKE_CUDA_ARCHITECTURES of its own; once every CMake file is
# read, each target with CUDA_ARCHITECTURES (not OFF) gets SGLANG_LXC_CUDA_ARCHS instead.
include_guard(GLOBAL)

function(sglang_lxc_cuda_archs dir archs)
  get_property(_targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(_target IN LISTS _targets)
    get_target_property(_type ${_target} TYPE)
    if(_type STREQUAL "INTERFACE_LIBRARY" OR _type STREQUAL "UTILITY")
      continue()
    endif()
    get_target_property(_archs ${_target} CUDA_ARCHITECTURES)
    if(_archs AND NOT _archs STREQUAL "OFF")
      message(STATUS "sglang-lxc: ${_target}: CUDA_ARCHITECTURES ${_archs} -> ${archs}")
      set_property(TARGET ${_target} PROPERTY CUDA_ARCHITECTURES ${archs})
    endif()
  endforeach()
  get_property(_subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(_sub IN LISTS _subdirs)
    sglang_lxc_cuda_archs("${_sub}" "${archs}")
  endforeach()
endfunction()

function(sglang_lxc_cuda_archs_all)
  sglang_lxc_cuda_archs("${CMAKE_SOURCE_DIR}" "${SGLANG_LXC_CUDA_ARCHS}")
endfunction()

if(SGLANG_LXC_CUDA_ARCHS)
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL sglang_lxc_cuda_archs_all)
endif()
"""
