"""Start SGLang's server as `python -m sglang.launch_server` does, API keys kept out of its log.

SGLang 0.5.12 logs `server_args=ServerArgs(..., api_key='...', admin_api_key=...)` at every start
(sglang/srt/entrypoints/engine.py): the key the instance read from its 0640 --config file would
be in the journal, which root and the systemd-journal and adm groups read. Every log record of
this process is made through a record factory that masks those two fields; nothing else changes.
Installed by the sglang_serve role; sglang_serve_launch_command runs it with the serving venv's
python.
"""

import logging
import re
import runpy

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


if __name__ == "__main__":
    logging.setLogRecordFactory(masked_records(logging.getLogRecordFactory()))
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
