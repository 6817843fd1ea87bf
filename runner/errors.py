"""Exception hierarchy of the runner (ansible_collections.sglang_lxc.serving.runner)."""


class SglangLxcError(Exception):
    """Base class for every error this package raises on purpose."""


class PrerequisiteError(SglangLxcError):
    """Something the host must provide is missing; the message says how to install it."""


class RunError(SglangLxcError):
    """A playbook could not be started or ended in an unexpected way."""
