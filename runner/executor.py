"""Run ansible-playbook through ansible-runner and keep the run's todo checklist.

The playbook is planned (plays x hosts, ``planner``) in a worker thread while ansible-playbook
starts; events are folded into the checklist (``events``) only once the plan is in, so every
milestone is listed as pending before the first task result counts. The checklist is shown
live (``render_live``) and written to the run's artifact folder (``reports``).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import ansible_runner

from .artifacts import mark_latest, new_run_id
from .checklist import Checklist, ExitCode, RunInfo, Status, TodoItem, now_iso
from .errors import RunError
from .events import ChecklistReducer
from .paths import PROJECT_ROOT
from .planner import Plan, plan_in_subprocess
from .render_live import LiveView, PlainView, make_view
from .reports import write_all, write_json

log = logging.getLogger(__name__)

# events still written to job_events/ (few per run); the rest only feed the checklist
KEPT_EVENTS = frozenset({
    "playbook_on_start",
    "playbook_on_play_start",
    "runner_on_failed",
    "runner_on_unreachable",
    "playbook_on_stats",
    "error",
})
# failures whose display ansible may print uncensored (ansible-core 2.19 prints the message of a
# failing no_log action as "[ERROR]: Task failed: Action failed: <msg>")
FAILURE_EVENTS = frozenset({"runner_on_failed", "runner_item_on_failed", "runner_on_unreachable"})
NO_LOG_NOTE = "[sglang-lxc: output of a no_log task removed]"
JSON_WRITE_INTERVAL_S = 0.5
PEXPECT_TIMEOUT_S = 0.5  # how often ansible-runner asks whether to cancel
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass
class RunOptions:
    playbook: str
    inventories: list[str]
    extra_args: list[str] = field(default_factory=list)
    artifacts: str = "artifacts"
    view: str = "auto"  # auto | live | plain
    ansible_output: bool = False  # also stream ansible-playbook's own output
    keep_events: bool = False  # write every event to job_events/ (ansible-runner's default)


class _Cancel:
    """SIGINT/SIGTERM set a flag that ansible-runner polls through ``cancel_callback``."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __call__(self) -> bool:
        return self.requested

    def _handler(self, signum: int, frame: Any) -> None:
        self.requested = True

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handler)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


class RunSession:
    """Everything one run needs; ``execute()`` returns the exit code (``ExitCode``)."""

    def __init__(self, options: RunOptions, err: TextIO | None = None) -> None:
        self.options = options
        self.err = err or sys.stderr
        self.playbook = Path(options.playbook).resolve()
        if not self.playbook.is_file():
            raise RunError(f"playbook not found: {options.playbook}")
        self.inventories = [str(Path(i).resolve()) for i in options.inventories]
        for inventory in self.inventories:
            if not os.path.exists(inventory):
                raise RunError(f"inventory not found: {inventory}")
        self.root = Path(options.artifacts).resolve()
        self.run_id = new_run_id(self.playbook)
        self.run_dir = self.root / self.run_id
        self.run_dir.mkdir(parents=True, exist_ok=False)
        self.lock = threading.Lock()
        self.checklist = Checklist(run=RunInfo(
            id=self.run_id, playbook=str(self.playbook), artifact_dir=str(self.run_dir),
            started=now_iso(),
        ))
        self.reducer = ChecklistReducer(self.checklist, on_change=self._on_change)
        mode = "plain" if options.ansible_output else options.view
        self.view: PlainView | LiveView = make_view(mode, self.checklist, self.lock)
        self.cancel = _Cancel()
        self._plan_future: Future[Plan] | None = None
        self._plan_loaded = False
        self._dirty = False
        self._last_write = 0.0
        self.handler_errors = 0

    # -- environment -------------------------------------------------------------------------
    def envvars(self) -> dict[str, str]:
        env: dict[str, str] = {}
        config = os.environ.get("ANSIBLE_CONFIG") or str(PROJECT_ROOT / "ansible.cfg")
        if os.path.isfile(config):
            env["ANSIBLE_CONFIG"] = config
        if "ANSIBLE_FORCE_COLOR" not in os.environ:
            env["ANSIBLE_FORCE_COLOR"] = "0"
        venv_bin = Path(sys.executable).parent
        if not shutil.which("ansible-playbook") and (venv_bin / "ansible-playbook").exists():
            # run from a venv that is not activated: use its ansible-playbook
            env["PATH"] = os.pathsep.join([str(venv_bin), os.environ.get("PATH", os.defpath)])
        return env

    # -- plan --------------------------------------------------------------------------------
    def start_planning(self, env: dict[str, str]) -> None:
        """List plays x hosts in a child process (same configuration as ansible-playbook)."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sglang-lxc-plan")
        self._plan_future = pool.submit(
            plan_in_subprocess,
            str(self.playbook),
            self.inventories,
            list(self.options.extra_args),
            env,
        )
        self._plan_future.add_done_callback(lambda _f: self.ensure_plan())
        pool.shutdown(wait=False)

    def ensure_plan(self) -> None:
        """Load the plan into the checklist once (waits for the planner if need be)."""
        if self._plan_loaded or self._plan_future is None:
            return
        try:
            plan: Plan | None = self._plan_future.result()
        except Exception as exc:  # the run goes on; items appear as plays start
            plan = None
            note = f"could not list the plays before the run: {_ANSI.sub('', str(exc)).strip()}"
            log.warning("%s", note)
        else:
            note = None
        with self.lock:
            if self._plan_loaded:
                return
            self._plan_loaded = True
            if plan is not None:
                self.reducer.load_plan(plan)
            if note:
                self.checklist.run.notes.append(note.splitlines()[0][:300])
                self.err.write(f"sglang-lxc: {note.splitlines()[0][:300]}\n")
            self.view.planned()
            self._write_json()

    # -- callbacks ---------------------------------------------------------------------------
    def _on_change(self, item: TodoItem, old: Status) -> None:
        self.view.changed(item, old)
        if item.status is not old:
            self._dirty = True

    def _write_json(self) -> None:
        write_json(self.checklist, self.run_dir)
        self._dirty = False
        self._last_write = time.monotonic()

    def event_handler(self, event: dict[str, Any]) -> bool:
        try:
            if not self._plan_loaded:
                self.ensure_plan()
            with self.lock:
                self.reducer.handle(event)
                if self._dirty and time.monotonic() - self._last_write > JSON_WRITE_INTERVAL_S:
                    self._write_json()
        except Exception:  # a reporting bug must never stop the run
            self.handler_errors += 1
            log.exception("checklist: could not handle event %s", event.get("event"))
        self._censor(event)
        return self.options.keep_events or event.get("event") in KEPT_EVENTS

    def _censor(self, event: dict[str, Any]) -> None:
        """Keep no_log values out of what ansible-runner writes next to our reports.

        ansible-runner writes this very dict to job_events/ and its ``stdout`` text to the
        ``stdout`` file (and the terminal with --ansible-output) after this handler returns. So
        replace the display text of failed no_log tasks, and drop set_stats data from the stats
        event (``set_stats`` under no_log is aggregated there uncensored; the checklist already
        has what it needs).
        """
        name = event.get("event")
        data = event.get("event_data") or {}
        if name in FAILURE_EVENTS:
            res = data.get("res")
            if isinstance(res, dict) and "censored" in res:
                event["stdout"] = NO_LOG_NOTE
        elif name == "playbook_on_stats":
            data.pop("artifact_data", None)

    # -- run ---------------------------------------------------------------------------------
    def execute(self, runner: Callable[..., Any] = ansible_runner.run) -> int:
        env = self.envvars()
        self.start_planning(env)
        mark_latest(self.root, self.run_dir)  # `sglang-lxc status` follows the run as it goes
        self.view.start()
        self.cancel.install()
        rc: int | None = None
        failure: str | None = None
        try:
            result = runner(
                private_data_dir=str(self.run_dir),
                artifact_dir=str(self.root),
                ident=self.run_id,
                project_dir=os.getcwd(),
                playbook=str(self.playbook),
                inventory=self.inventories,
                cmdline=shlex.join(self.options.extra_args) or None,
                envvars=env,
                quiet=not self.options.ansible_output,
                settings={"pexpect_timeout": PEXPECT_TIMEOUT_S},
                event_handler=self.event_handler,
                cancel_callback=self.cancel,
            )
            rc = result.rc
            interrupted = self.cancel.requested or result.status == "canceled"
        except KeyboardInterrupt:
            interrupted = True
        except Exception as exc:  # settle and write the checklist, then report it
            log.exception("ansible-runner failed")
            interrupted = False
            failure = f"ansible-runner failed: {type(exc).__name__}: {exc}"
        finally:
            self.cancel.restore()
        self.ensure_plan()
        with self.lock:
            code = self.reducer.finish(interrupted=interrupted, ansible_rc=rc)
            if failure:
                self.checklist.run.notes.append(failure[:300])
            if self.handler_errors:
                self.checklist.run.notes.append(
                    f"{self.handler_errors} events could not be read (see the log)")
            paths = write_all(self.checklist, self.run_dir)
        self.view.stop([str(p) for p in paths])
        if failure:
            self.err.write(f"sglang-lxc: {failure}\n")
        elif code is ExitCode.ERROR:
            self._show_ansible_error()
        return int(code)

    def _show_ansible_error(self) -> None:
        """ansible-playbook failed outside any task: show the end of its own output."""
        stdout = self.run_dir / "stdout"
        if not stdout.is_file():
            return
        lines = _ANSI.sub("", stdout.read_text(encoding="utf-8", errors="replace")).splitlines()
        tail = [line for line in lines if line.strip()][-15:]
        if tail:
            self.err.write("ansible-playbook said:\n" + "\n".join(f"  {t}" for t in tail) + "\n")


def run_playbook(
    playbook: str,
    inventories: list[str],
    extra_args: list[str],
    artifacts: str = "artifacts",
    view: str = "auto",
    ansible_output: bool = False,
    keep_events: bool = False,
) -> int:
    """Run ``playbook`` against ``inventories``; return an ``ExitCode`` value."""
    options = RunOptions(
        playbook=playbook,
        inventories=inventories,
        extra_args=list(extra_args),
        artifacts=artifacts,
        view=view,
        ansible_output=ansible_output,
        keep_events=keep_events,
    )
    return RunSession(options).execute()
