"""The gc_freeze callback, as ansible-playbook loads it from ansible.cfg: the task workers it forks
see the objects of the play's start frozen (gc.get_freeze_count(), read by a filter, which runs
in the worker), and without the callback they do not."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.lablib import REPO, VENV_BIN

FILTER = '''
import gc


class FilterModule:
    def filters(self):
        return {"freeze_count": lambda _: gc.get_freeze_count()}
'''

PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.debug:
        msg: "frozen={{ 0 | freeze_count }}"
"""


@pytest.fixture()
def play(tmp_path):
    (tmp_path / "filters").mkdir()
    (tmp_path / "filters" / "freeze.py").write_text(FILTER)
    (tmp_path / "play.yml").write_text(PLAY)
    return tmp_path


def frozen_in_worker(play, enabled: str | None) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_FILTER_PLUGINS=str(play / "filters"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               SGLANG_LXC_ARTIFACTS=str(play / "artifacts"))
    if enabled is not None:
        env["ANSIBLE_CALLBACKS_ENABLED"] = enabled
    run = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          str(play / "play.yml")], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    return int(re.search(r"frozen=(\d+)", run.stdout).group(1))


def test_the_workers_see_the_plays_objects_frozen(play):
    assert frozen_in_worker(play, None) > 10_000  # ansible.cfg enables it


def test_without_the_callback_nothing_is_frozen(play):
    assert frozen_in_worker(play, "sglang_lxc.serving.todo") == 0
