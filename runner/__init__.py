"""sglang-lxc: run the provisioning playbooks and the local lab."""

import logging

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())
