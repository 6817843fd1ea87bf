# Copyright: sglang-lxc contributors
# Apache-2.0
"""git's ``url.<base>.insteadOf`` as environment variables, for a controller that reaches git
repositories through mirrors (``sglang_kernel_git_url_rewrites``).

``{"file:///srv/mirror/": "https://github.com/"}`` makes git fetch
``https://github.com/NVIDIA/cutlass`` from ``file:///srv/mirror/NVIDIA/cutlass``: the same
rewrite a user would write in ``~/.gitconfig``, given to git through ``GIT_CONFIG_COUNT``,
``GIT_CONFIG_KEY_<n>`` and ``GIT_CONFIG_VALUE_<n>`` (git >= 2.31) so nothing on the controller
is changed. Used by role ``sglang`` (the clone, ``git ls-remote``) and by the action
``sglang_kernel_sources``; the filter ``git_url_rewrite_env`` (plugins/filter/git_rewrites.py)
wraps it.
"""

from __future__ import annotations


def git_url_rewrite_env(rewrites: dict | None) -> dict[str, str]:
    """Environment for git with each {base: prefix} as url.<base>.insteadOf = prefix."""
    env = {"GIT_TERMINAL_PROMPT": "0"}
    items = sorted((str(k), str(v)) for k, v in (rewrites or {}).items())
    env["GIT_CONFIG_COUNT"] = str(len(items))
    for i, (base, prefix) in enumerate(items):
        env[f"GIT_CONFIG_KEY_{i}"] = f"url.{base}.insteadOf"
        env[f"GIT_CONFIG_VALUE_{i}"] = prefix
    return env
