"""roles/sglang_serve/files/sglang-launch.py: the log record factory that masks API keys.

The serve lab suite proves the whole launcher on SGLang's real server (no journal line holds the
key); this checks the mask itself with the logging module's own records and formatting."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

LAUNCH = Path(__file__).resolve().parents[3] / "roles/sglang_serve/files/sglang-launch.py"
spec = importlib.util.spec_from_file_location("sglang_launch", LAUNCH)
launch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(launch)  # its start runs only as __main__


@pytest.fixture
def records():
    """Records of a logger while the masking factory is installed (restored afterwards)."""
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(self.format(record))

    before = logging.getLogRecordFactory()
    logging.setLogRecordFactory(launch.masked_records(before))
    logger = logging.getLogger("sglang.srt.entrypoints.engine.test")
    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield logger, seen
    finally:
        logger.removeHandler(handler)
        logging.setLogRecordFactory(before)


def test_serverargs_line_keeps_everything_but_the_keys(records):
    logger, seen = records
    # the shape of SGLang 0.5.12's line: logger.info(f"{server_args=}") of a dataclass repr
    text = ("server_args=ServerArgs(model_path='/srv/models/m', api_key='sk-1 2\\'3', "
            "admin_api_key=\"adm'in\", port=30000, served_model_name='api_key=x')")
    logger.info(text)
    logger.info("key %s in %r", "api_key='sk-arg'", "place")
    assert seen[0] == ("server_args=ServerArgs(model_path='/srv/models/m', "
                       "api_key='<redacted>', admin_api_key='<redacted>', port=30000, "
                       "served_model_name='api_key=x')")
    assert seen[1] == "key api_key='<redacted>' in 'place'"
    assert all("sk-" not in line and "adm'in" not in line for line in seen)


def test_other_records_are_left_alone(records):
    logger, seen = records
    logger.info("Load weight %s. avail mem=%.2f GB", "begin", 18.6)
    logger.info("api_key=None")
    assert seen == ["Load weight begin. avail mem=18.60 GB", "api_key=None"]


# The rendezvous: the lab suite proves on SGLang's real server that nothing listens beyond
# loopback (tests/integration/serve/test_serve.py, ss -ltnp); these check the choice itself.
def test_a_group_on_one_host_meets_in_a_new_file_store_on_loopback(tmp_path, monkeypatch):
    monkeypatch.setattr(launch.tempfile, "tempdir", str(tmp_path))
    environ: dict[str, str] = {"NCCL_SOCKET_IFNAME": "eth1"}
    url = launch.store_on_no_port(["--config", "/etc/sglang/instances/a.yaml", "--tp", "2"],
                                  environ)
    assert url == environ["SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE"]
    folder = Path(url.removeprefix("file://")).parent
    assert folder.parent == tmp_path and folder.is_dir() and not any(folder.iterdir())
    assert environ["GLOO_SOCKET_IFNAME"] == "lo"
    assert environ["NCCL_SOCKET_IFNAME"] == "eth1"  # what the environment says wins
    again = launch.store_on_no_port([], {})
    assert again != url  # a new folder each start: a store left by a crash is never reused


@pytest.mark.parametrize("argv", [["--nnodes", "2"], ["--dist-init-addr=10.0.0.1:5000"]])
def test_a_group_across_nodes_or_a_given_rendezvous_is_left_alone(argv):
    environ: dict[str, str] = {}
    assert launch.store_on_no_port(argv, environ) is None and environ == {}
    given = {"SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE": "env://"}
    assert launch.store_on_no_port([], given) is None
    assert given == {"SGLANG_DISTRIBUTED_INIT_METHOD_OVERRIDE": "env://"}
