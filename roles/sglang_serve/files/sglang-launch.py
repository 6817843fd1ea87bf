"""Start SGLang's server as `python -m sglang.launch_server` does, API keys kept out of its log,
its process group's store on no port.

SGLang 0.5.12 logs `server_args=ServerArgs(..., api_key='...', admin_api_key=...)` at every start
(sglang/srt/entrypoints/engine.py): the key the instance read from its 0640 --config file would
be in the journal, which root and the systemd-journal and adm groups read. Every log record of
this process is made through a record factory that masks those two fields; nothing else changes.

SGLang 0.5.12's scheduler meets the other ranks of its TP group (a group of one included) in a
torch.distributed store: ``tcp://<host>:<nccl port>`` (ModelRunner.init_torch_distributed,
srt/model_executor/model_runner.py), a TCPStore that torch binds to every address ([::], no
bind option) on a random port, unauthenticated, reachable from the bridge. SGLang takes
another rendezvous from ``SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE`` (srt/environ.py): this sets
it to a FileStore in a fresh folder of the unit's private /tmp, unless it is set already or the
instance spans nodes (--nnodes, --dist-init-addr: the store must then be reachable). For the same
instance, the group's other sockets are put on loopback where the environment does not say
otherwise: gloo's (GLOO_SOCKET_IFNAME; by default the address the host name resolves to, the
bridge's on some images) and NCCL's bootstrap (NCCL_SOCKET_IFNAME; by default a non-loopback
interface).

Installed by the sglang_serve role; sglang_serve_launch_command runs it with the serving venv's
python.
"""

import logging
import os
import re
import runpy
import sys
import tempfile

KEYS = re.compile(r"\b((?:admin_)?api_key=)(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")
MASK = r"\1'<redacted>'"


def masked_records(factory):
    """A log record factory around ``factory`` that masks api_key and admin_api_key values."""

    def make(*args, **kwargs):
        record = factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format is logging's to report, at emit
            return record
        if "api_key=" in message:
            record.msg, record.args = KEYS.sub(MASK, message), ()
        return record

    return make


def store_on_no_port(argv, environ):
    """Point SGLang's rendezvous at a FileStore in a new folder (the environment changed in
    place), unless one is given or the instance spans nodes. Returns the URL set, or None."""
    override = "SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE"
    spans = any(arg.split("=", 1)[0] in ("--nnodes", "--dist-init-addr") for arg in argv)
    if environ.get(override) or spans:
        return None
    folder = tempfile.mkdtemp(prefix="sglang-dist-")
    environ[override] = "file://" + os.path.join(folder, "store")
    for interface in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        environ.setdefault(interface, "lo")
    return environ[override]


if __name__ == "__main__":
    store_on_no_port(sys.argv[1:], os.environ)
    logging.setLogRecordFactory(masked_records(logging.getLogRecordFactory()))
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
