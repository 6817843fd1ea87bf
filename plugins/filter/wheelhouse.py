# Copyright: sglang-lxc contributors
# Apache-2.0
"""Filters of role wheelhouse: the set's fingerprint and the pip/uv command lines.

Filters:
  wheelhouse_fingerprint(spec)                       -> 16 hex digits naming the set
  wheelhouse_download_argv(python, dest, ...)        -> pip download of the set, wheels only
  wheelhouse_install_argv(installer, wheel_dir, ...) -> offline install from wheel_dir

The logic is plugins/plugin_utils/wheelhouse.py.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.wheelhouse import (
    wheelhouse_download_argv,
    wheelhouse_fingerprint,
    wheelhouse_install_argv,
)


class FilterModule:
    def filters(self):
        return {
            "wheelhouse_fingerprint": wheelhouse_fingerprint,
            "wheelhouse_download_argv": wheelhouse_download_argv,
            "wheelhouse_install_argv": wheelhouse_install_argv,
        }
