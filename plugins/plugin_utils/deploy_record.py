# Copyright: sglang-lxc contributors
# Apache-2.0
"""The deploy record of a role (roles/deploy_record), one home for its body and its probe check.

``deploy_record_body`` is what the record says; ``deploy_record_concern`` is the ``record``
concern state_probe reads it by. The record file holds the body plus ``time`` (when this body was
first recorded); the probe compares everything but ``time``, so a converged rerun writes nothing.
The filters in plugins/filter/deploy_record.py wrap these. Pure Python with no Ansible import.
"""

from __future__ import annotations

import hashlib
import json


def deploy_record_body(role, status="deployed", reason="", version="", inputs=None, published=None):
    """What the record says, less ``time``; ``inputs`` only by their sha256, ``published`` (what
    the role tells the world, e.g. its Prometheus targets) as it is."""
    digest = hashlib.sha256(json.dumps(inputs or {}, sort_keys=True).encode()).hexdigest()
    return {
        "role": str(role),
        "status": str(status),
        "reason": str(reason if reason is not None else "").strip(),
        "version": str(version if version is not None else ""),
        "inputs_sha256": digest,
        **({"published": published} if published else {}),
    }


def deploy_record_concern(body, record_dir="/etc/sglang/deployed"):
    """The ``record`` concern: the records folder and the record, owned by root."""
    return {
        "name": "record",
        "paths": [
            {
                "path": record_dir,
                "state": "directory",
                "mode": "0755",
                "owner": "root",
                "group": "root",
            },
        ],
        "records": [
            {
                "path": f"{record_dir}/{body['role']}.json",
                "equal": body,
                "ignore": ["time"],
                "mode": "0644",
                "owner": "root",
                "group": "root",
            },
        ],
    }
