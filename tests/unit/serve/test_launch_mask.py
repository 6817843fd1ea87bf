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
