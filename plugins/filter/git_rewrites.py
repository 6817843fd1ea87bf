# Copyright: sglang-lxc contributors
# Apache-2.0
"""git's ``url.<base>.insteadOf`` as environment variables (``sglang_kernel_git_url_rewrites``).

Filter:
  git_url_rewrite_env(rewrites) -> {"GIT_CONFIG_COUNT": ..., "GIT_CONFIG_KEY_0": ..., ...}

The logic is plugins/plugin_utils/git_rewrites.py.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.git_rewrites import (
    git_url_rewrite_env,
)


class FilterModule:
    def filters(self):
        return {"git_url_rewrite_env": git_url_rewrite_env}
