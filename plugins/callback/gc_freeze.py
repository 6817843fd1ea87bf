"""Less CPU per task on the controller: Python's garbage collector freezes what a play starts with.

ansible-playbook forks a worker for every task and host. Whatever the main process holds when
a play starts (the loaded plugins, the inventory, the parsed playbook) lives for the whole run,
yet every garbage collection in the main process walks it again, and so does a worker's: each
walk reads and writes the objects' headers, so a forked worker copies the pages it walks.
``gc.freeze()`` (Python's own answer for processes that fork without exec) moves the objects
alive at that point into a permanent generation that no collection walks.
"""

from __future__ import annotations

DOCUMENTATION = """
name: gc_freeze
type: aggregate
short_description: freeze the controller's long-lived objects out of garbage collection
description:
  - At the start of each play, collects garbage once, then calls Python's C(gc.freeze), so
    that the objects alive then (plugins, inventory, the parsed playbook) are never walked again
    by a collection, in ansible-playbook's main process or in the workers it forks for its tasks.
  - Changes no output and no result. Objects made later (task results, facts) are collected as
    before, and a frozen object is still freed once nothing refers to it; only a reference cycle
    among frozen objects waits for its process's end.
  - Measured on the lab (docs/performance.md, "Current figures"), the no-op rerun of site.yml,
    77 tasks, four alternating pairs, controller CPU 4.34 s without it and 3.85 s with it on
    average.
requirements:
  - enable in configuration (callbacks_enabled = sglang_lxc.serving.gc_freeze)
"""

import gc

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sglang_lxc.serving.gc_freeze"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_play_start(self, play) -> None:
        gc.collect()
        gc.freeze()
