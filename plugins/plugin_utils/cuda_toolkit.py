# Copyright: sglang-lxc contributors
# Apache-2.0
"""cuda_toolkit's input checks, all at once and before anything changes.

  cuda_toolkit_problems(settings) -> one message per problem, [] when the inputs are sound

``settings``: version, source, releases, overrides, components (the five wheels a release must
name), cuobjdump (the nvidia-cuda-cuobjdump version installed beside them, same major), paths
(variable -> value, each must be absolute), system_root.
Controller side, plain Python with no Ansible import: the filter of the same name
(plugins/filter/cuda_toolkit.py) wraps it, and tests import it directly.
"""

from __future__ import annotations

import re


def cuda_toolkit_problems(settings):
    """One message per problem of ``settings``, [] when the inputs are sound."""
    version = str(settings["version"])
    source = settings.get("source", "wheels")
    releases = settings.get("releases") or {}
    overrides = settings.get("overrides") or {}
    components = list(settings.get("components") or [])
    out = []
    if not re.match(r"^[0-9]+\.[0-9]+$", version) or (
        source != "system" and version not in {str(k) for k in releases}
    ):
        out.append(
            f"cuda_toolkit_version '{version}' is not a known CUDA release: use one of "
            f"{', '.join(sorted(str(k) for k in releases))} (quoted, major.minor), or add its "
            "exact wheel versions to cuda_toolkit_releases."
        )
    elif source == "wheels":
        pins = {**(releases.get(version) or {}), **overrides}
        missing = [c for c in components if c not in pins]
        unknown = [p for p in pins if p not in components]
        if missing or unknown:
            out.append(
                f"cuda_toolkit_releases['{version}'] plus cuda_toolkit_wheel_overrides must name "
                f"exactly {', '.join(components)}; missing: {', '.join(missing) or 'none'}; "
                f"unknown: {', '.join(unknown) or 'none'}."
            )
        on_version = re.compile("^" + re.escape(version) + r"(\.[0-9]+)+$")
        for name, pin in pins.items():
            if not on_version.match(str(pin)):
                where = (
                    "cuda_toolkit_wheel_overrides"
                    if name in overrides
                    else f"cuda_toolkit_releases['{version}']"
                )
                out.append(
                    f"{where}['{name}'] is '{pin}', not on cuda_toolkit_version {version}: nvcc, "
                    "crt, nvvm, cccl and the runtime must share one major.minor, or nvcc fails "
                    'with "compiler and toolkit headers are incompatible".'
                )
    reader = str(settings.get("cuobjdump") or "")
    major = version.split(".", maxsplit=1)[0]
    if (
        source == "wheels"
        and reader
        and not re.match("^" + re.escape(major) + r"(\.[0-9]+)+$", reader)
    ):
        out.append(
            f"cuda_toolkit_cuobjdump_versions['{version}'] is '{reader}', not on CUDA "
            f"{major}: cuobjdump reads the cubins of its own major."
        )
    for name, value in (settings.get("paths") or {}).items():
        if not str(value).startswith("/"):
            out.append(f"{name} must be an absolute path, got '{value}'.")
    root = settings.get("system_root") or ""
    if source == "system" and not str(root).startswith("/"):
        out.append(
            "cuda_toolkit_source is 'system' but cuda_toolkit_system_root is not an absolute "
            f"path ('{root}')."
        )
    return out
