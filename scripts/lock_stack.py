#!/usr/bin/env python3
"""Resolve the pinned SGLang serving stack and write its lock file.

The lock is what role `sglang` installs through the controller wheelhouse. It is resolved for the
container's interpreter and platform (CPython 3.11, manylinux x86_64), binary wheels only, against
the public index, with pip's own resolver (metadata only: `pip install --dry-run --report`).

    python scripts/lock_stack.py --sglang 0.5.12          # writes the default lock
    python scripts/lock_stack.py --sglang 0.5.12 --check  # resolves, compares, exit 1 on drift
    python scripts/lock_stack.py --sglang 0.5.13 --pin torch==2.11.0  # newer sglang, extra pins

Two files per version under roles/sglang/files/locks/:
  sglang-<ver>.txt        the serving stack (sglang, torch, flashinfer, sglang-kernel, ...)
  sglang-<ver>-build.txt  build tools for sgl-kernel from source (scikit-build-core, cmake, ninja),
                          resolved together with the stack so they never move a stack pin.

pip runs with `--isolated` (no config files, no PIP_* environment): machine-local constraint files,
extra indexes or find-links never leak into a lock. The index defaults to PyPI (--index-url or
LOCK_STACK_INDEX_URL to change it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
LOCK_DIR = REPO_ROOT / "roles" / "sglang" / "files" / "locks"
DEFAULT_INDEX = "https://pypi.org/simple"
DEFAULT_PYTHON = "3.11"
DEFAULT_GLIBC = "2.36"  # Debian 12, the container OS


def platforms_for(glibc: str, arch: str = "x86_64") -> tuple[str, ...]:
    """Every wheel platform tag a glibc `glibc` Linux on `arch` accepts, best first."""
    major, minor = (int(x) for x in glibc.split("."))
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 16, -1)]
    return (*tags, f"manylinux2014_{arch}", f"linux_{arch}")


DEFAULT_PLATFORMS = platforms_for(DEFAULT_GLIBC)
# Tools sgl-kernel's source build needs in the serving venv (it builds with --no-build-isolation
# against the installed torch). cmake >= 3.31 per sgl-kernel's README.
DEFAULT_BUILD_TOOLS = ("scikit-build-core", "cmake>=3.31", "ninja", "wheel", "setuptools-scm")


class LockError(Exception):
    """The stack does not resolve, or pip could not be run."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str | None = None

    @property
    def key(self) -> str:
        return canonical(self.name)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_command(
    requirements: list[str],
    *,
    python_version: str,
    platforms: tuple[str, ...],
    index_url: str,
    report: Path,
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "--isolated",
        "--disable-pip-version-check",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--quiet",
        "--report",
        str(report),
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        python_version,
        "--abi",
        "cp" + python_version.replace(".", ""),
        "--abi",
        "abi3",
        "--abi",
        "none",
        "--index-url",
        index_url,
    ]
    for platform in platforms:
        cmd += ["--platform", platform]
    return cmd + requirements


def resolve(
    requirements: list[str],
    *,
    python_version: str = DEFAULT_PYTHON,
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS,
    index_url: str = DEFAULT_INDEX,
    timeout: int = 900,
) -> list[Pin]:
    """Resolve `requirements` with pip for the target interpreter; return the pins, sorted."""
    with tempfile.TemporaryDirectory(prefix="lock-stack-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = pip_command(
            requirements,
            python_version=python_version,
            platforms=platforms,
            index_url=index_url,
            report=report,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise LockError(f"pip did not finish resolving within {timeout}s") from exc
        if proc.returncode != 0:
            raise LockError(explain_failure(requirements, proc.stderr + proc.stdout))
        data = json.loads(report.read_text())
    pins = []
    for item in data.get("install", []):
        meta = item["metadata"]
        hashes = item.get("download_info", {}).get("archive_info", {}).get("hashes", {})
        pins.append(Pin(meta["name"], meta["version"], hashes.get("sha256")))
    return sorted(pins, key=lambda p: p.key)


def explain_failure(requirements: list[str], output: str) -> str:
    """Turn pip's resolver output into a short message that names the conflicting pins."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    keep = [
        ln
        for ln in lines
        if ln.startswith(("ERROR", "The conflict is caused by", "The user requested"))
        or " depends on " in ln
        or "No matching distribution" in ln
        or "Could not find a version" in ln
    ]
    detail = "\n  ".join(keep or lines[-15:])
    return f"the pinned stack does not resolve for {' '.join(requirements)}:\n  {detail}"


def render(
    pins: list[Pin], *, title: str, command: str, python_version: str, glibc: str = DEFAULT_GLIBC
) -> str:
    head = [
        f"# {title}",
        f"# Resolved for CPython {python_version}, glibc {glibc} x86_64, binary wheels only.",
        f"# Generated by: {command}",
        "# Do not edit by hand; rerun the command above.",
    ]
    body = [f"{p.name}=={p.version}" + (f"  # sha256:{p.sha256}" if p.sha256 else "") for p in pins]
    return "\n".join(head + body) + "\n"


def read_lock(path: Path) -> dict[str, str]:
    """name -> version of a lock file (comments ignored)."""
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        pins[canonical(name)] = version.strip()
    return pins


def build_lock(
    sglang: str,
    extra_pins: list[str],
    build_tools: list[str],
    *,
    python_version: str,
    index_url: str,
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS,
) -> tuple[list[Pin], list[Pin]]:
    stack_reqs = [f"sglang=={sglang}", *extra_pins]
    stack = resolve(
        stack_reqs, python_version=python_version, index_url=index_url, platforms=platforms
    )
    # Build tools are resolved with every stack pin fixed, so they can never move one.
    fixed = [f"{p.name}=={p.version}" for p in stack]
    with_tools = resolve(
        fixed + build_tools, python_version=python_version, index_url=index_url, platforms=platforms
    )
    stack_keys = {p.key for p in stack}
    tools = [p for p in with_tools if p.key not in stack_keys]
    return stack, tools


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sglang", required=True, help="sglang version to lock, e.g. 0.5.12")
    parser.add_argument(
        "--pin",
        action="append",
        default=[],
        help="extra requirement resolved with sglang (repeatable), e.g. torch==2.11.0",
    )
    parser.add_argument(
        "--build-tool",
        action="append",
        default=None,
        help="build tool requirement for sgl-kernel from source (repeatable; "
        f"default: {' '.join(DEFAULT_BUILD_TOOLS)})",
    )
    parser.add_argument(
        "--python-version", default=DEFAULT_PYTHON, help="target interpreter (default: %(default)s)"
    )
    parser.add_argument(
        "--glibc",
        default=DEFAULT_GLIBC,
        help="target glibc, selects manylinux tags (default: %(default)s)",
    )
    parser.add_argument(
        "--index-url",
        default=os.environ.get("LOCK_STACK_INDEX_URL", DEFAULT_INDEX),
        help="package index (default: $LOCK_STACK_INDEX_URL or %(default)s)",
    )
    parser.add_argument(
        "--lock-dir",
        type=Path,
        default=LOCK_DIR,
        help="where lock files go (default: roles/sglang/files/locks)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="resolve and compare with the committed lock; exit 1 on drift",
    )
    args = parser.parse_args(argv)

    tools = args.build_tool if args.build_tool is not None else list(DEFAULT_BUILD_TOOLS)
    command = (
        "python scripts/lock_stack.py --sglang "
        + args.sglang
        + "".join(f" --pin '{p}'" for p in args.pin)
    )
    try:
        stack, build = build_lock(
            args.sglang,
            args.pin,
            tools,
            python_version=args.python_version,
            index_url=args.index_url,
            platforms=platforms_for(args.glibc),
        )
    except LockError as exc:
        print(f"lock_stack: {exc}", file=sys.stderr)
        return 2

    stack_path = args.lock_dir / f"sglang-{args.sglang}.txt"
    build_path = args.lock_dir / f"sglang-{args.sglang}-build.txt"
    outputs = {
        stack_path: render(
            stack,
            title=f"SGLang {args.sglang} serving stack lock",
            command=command,
            python_version=args.python_version,
            glibc=args.glibc,
        ),
        build_path: render(
            build,
            title=f"sgl-kernel build tools for SGLang {args.sglang}",
            command=command,
            python_version=args.python_version,
            glibc=args.glibc,
        ),
    }
    if args.check:
        drift = False
        for path, text in outputs.items():
            if not path.exists() or path.read_text() != text:
                print(f"lock_stack: {path} is out of date", file=sys.stderr)
                drift = True
        return 1 if drift else 0
    args.lock_dir.mkdir(parents=True, exist_ok=True)
    for path, text in outputs.items():
        path.write_text(text)
        print(
            f"wrote {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path} "
            f"({text.count(chr(10)) - 4} packages)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
