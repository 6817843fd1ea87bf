"""``sglang-lxc run``: ansible-playbook through ansible-runner, with the todo callback on.

The checklist itself is kept by the ``todo`` callback plugin (plugins/callback/todo.py) inside
ansible-playbook: it lists every milestone before the first task, follows the run and writes
``todo.json``, ``todo.md``, ``junit.xml`` (and ``prometheus_targets.json``) into ansible-runner's
artifact folder. This layer only starts it, shows what the callback wrote (``render_live``),
keeps ``no_log`` output out of ansible-runner's own files, ends the whole process tree on
SIGINT/SIGTERM, settles the checklist when ansible-playbook did not (interrupted, crashed) and
turns it into an exit code.
"""

from __future__ import annotations

import configparser
import logging
import os
import re
import shlex
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import ansible_runner

from . import procs
from .artifacts import mark_latest, new_run_dir
from .checklist import Checklist, ExitCode, RunInfo, now_iso
from .errors import RunError
from .events import ChecklistReducer
from .paths import PROJECT_ROOT
from .render_live import LiveView, PlainView, make_view
from .reports import TODO_JSON, read_json, write_all

log = logging.getLogger(__name__)

# events still written to job_events/ (few per run); the rest only go by
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
POLL_INTERVAL_S = 0.25  # how often the view reads todo.json
PEXPECT_TIMEOUT_S = 0.5  # how often ansible-runner asks whether to cancel
# the todo callback, by its FQCN in the collection this checkout is (galaxy.yml)
CALLBACK = "sglang_lxc.serving.todo"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# ansible-playbook options that need a person at ansible-playbook's own terminal
REFUSED = {
    "--step": "--step asks before every task on ansible-playbook's own terminal, which "
              "sglang-lxc run does not give it; run `ansible-playbook --step ...` instead "
              "(the todo callback still writes the checklist)",
}


def refused_option(extra_args: list[str]) -> str | None:
    """Why an ansible-playbook option cannot go through ``sglang-lxc run`` (None: it can)."""
    for arg in extra_args:
        if arg in REFUSED:
            return REFUSED[arg]
    return None


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


def _inventory_source(source: str) -> str:
    """A path (made absolute, must exist) or an inline host list (``localhost,``) as is."""
    if "," in source:
        return source
    path = Path(source)
    if not path.exists():
        raise RunError(f"inventory not found: {source}")
    return str(path.resolve())


def _config_list(config: configparser.ConfigParser, *keys: str) -> list[str]:
    for key in keys:
        value = config.get("defaults", key, fallback="")
        if value:
            return [v.strip() for v in value.replace("\n", ",").split(",") if v.strip()]
    return []


def callback_env(config_path: str | None, environ: dict[str, str]) -> dict[str, str]:
    """ANSIBLE_CALLBACK_PLUGINS and ANSIBLE_CALLBACKS_ENABLED with the todo callback in them.

    ansible-runner sets ANSIBLE_CALLBACK_PLUGINS (to add its own), which hides
    ``callback_plugins`` of ansible.cfg: so the configured folders go into the variable, and
    the todo callback (found by FQCN through ``collections_path``) joins the enabled callbacks
    (ARA, junit... stay enabled).
    """
    config = configparser.ConfigParser(interpolation=None)
    base = Path.cwd()
    if config_path and os.path.isfile(config_path):
        config.read(config_path)
        base = Path(config_path).resolve().parent
    dirs = [d for d in environ.get("ANSIBLE_CALLBACK_PLUGINS", "").split(os.pathsep) if d]
    if not dirs:
        configured = config.get("defaults", "callback_plugins", fallback="")
        dirs = [str(base / os.path.expanduser(d.strip()))
                for d in configured.split(os.pathsep) if d.strip()]
    enabled = [e.strip() for e in environ.get("ANSIBLE_CALLBACKS_ENABLED", "").split(",")
               if e.strip()] or _config_list(config, "callbacks_enabled", "callback_whitelist")
    if CALLBACK not in enabled:
        enabled.append(CALLBACK)
    env = {"ANSIBLE_CALLBACKS_ENABLED": ",".join(enabled)}
    if dirs:
        env["ANSIBLE_CALLBACK_PLUGINS"] = os.pathsep.join(dirs)
    return env


class RunSession:
    """Everything one run needs; ``execute()`` returns the exit code (``ExitCode``)."""

    def __init__(self, options: RunOptions, err: TextIO | None = None) -> None:
        self.options = options
        self.err = err or sys.stderr
        why = refused_option(options.extra_args)
        if why:
            raise RunError(why)
        self.playbook = Path(options.playbook).resolve()
        if not self.playbook.is_file():
            raise RunError(f"playbook not found: {options.playbook}")
        self.inventories = [_inventory_source(i) for i in options.inventories]
        self.root = Path(options.artifacts).resolve()
        self.run_dir = new_run_dir(self.root, self.playbook)
        self.run_id = self.run_dir.name
        self.lock = threading.Lock()
        self.checklist = Checklist(run=RunInfo(
            id=self.run_id, playbook=str(self.playbook), artifact_dir=str(self.run_dir),
            started=now_iso(), runner_pid=os.getpid(),
        ))
        mode = "plain" if options.ansible_output else options.view
        self.view: PlainView | LiveView = make_view(mode, self.checklist, self.lock)
        self.cancel = _Cancel()
        self._stop_polling = threading.Event()
        self._seen_mtime = 0
        self._planned = False

    # -- environment -------------------------------------------------------------------------
    def envvars(self) -> dict[str, str]:
        env: dict[str, str] = {}
        config = os.environ.get("ANSIBLE_CONFIG") or str(PROJECT_ROOT / "ansible.cfg")
        if os.path.isfile(config):
            env["ANSIBLE_CONFIG"] = config
        # ansible-playbook runs on a pseudo-terminal: without this it colours its output, and
        # ansible-runner saves it in the artifact `stdout` file
        env["ANSIBLE_NOCOLOR"] = "1"
        env["ANSIBLE_FORCE_COLOR"] = "0"
        env.update(callback_env(env.get("ANSIBLE_CONFIG"), dict(os.environ)))
        env["SGLANG_LXC_RUNNER_PID"] = str(os.getpid())
        venv_bin = Path(sys.executable).parent
        if not shutil.which("ansible-playbook") and (venv_bin / "ansible-playbook").exists():
            # run from a venv that is not activated: use its ansible-playbook
            env["PATH"] = os.pathsep.join([str(venv_bin), os.environ.get("PATH", os.defpath)])
        return env

    # -- following the callback's todo.json --------------------------------------------------
    def _poll(self) -> None:
        while not self._stop_polling.wait(POLL_INTERVAL_S):
            self.refresh()

    def refresh(self) -> bool:
        """Read the callback's todo.json if it changed; show what changed. True if read."""
        path = self.run_dir / TODO_JSON
        try:
            mtime = path.stat().st_mtime_ns
            if mtime == self._seen_mtime:
                return False
            latest = read_json(path)
        except (OSError, ValueError):
            return False
        self._seen_mtime = mtime
        with self.lock:
            old = {i.id: i.status for i in self.checklist.items}
            runner_pid = self.checklist.run.runner_pid
            self.checklist.run = latest.run
            self.checklist.run.runner_pid = latest.run.runner_pid or runner_pid
            self.checklist.items[:] = latest.items
            self.checklist.__post_init__()
            if not self._planned:
                if not self.checklist.items and latest.run.exit_code is None:
                    return True  # our own placeholder: the callback has not listed the plan
                self._planned = True
                self.view.planned()
            else:
                for item in self.checklist.items:
                    self.view.changed(item, old.get(item.id, item.status))
        return True

    def event_handler(self, event: dict[str, Any]) -> bool:
        self._censor(event)
        return self.options.keep_events or event.get("event") in KEPT_EVENTS

    def _censor(self, event: dict[str, Any]) -> None:
        """Keep no_log values out of what ansible-runner writes next to our reports.

        ansible-runner writes this very dict to job_events/ and its ``stdout`` text to the
        ``stdout`` file (and the terminal with --ansible-output) after this handler returns. So
        replace the display text of failed no_log tasks, and drop set_stats data from the stats
        event (``set_stats`` under no_log is aggregated there uncensored).
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
        mark_latest(self.root, self.run_dir)  # `sglang-lxc status` follows the run as it goes
        write_all(self.checklist, self.run_dir)  # until the callback writes its own
        self._seen_mtime = 0
        self.view.start()
        procs.become_subreaper()
        self.cancel.install()
        poller = threading.Thread(target=self._poll, name="sglang-lxc-view", daemon=True)
        poller.start()
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
        self._stop_polling.set()
        poller.join()
        self._seen_mtime = 0
        self.refresh()
        if interrupted:
            self.end_tree()
        self.cancel.restore()
        with self.lock:
            code = self.settle(interrupted, rc)
            if failure:
                self.checklist.run.notes.append(failure[:300])
            paths = write_all(self.checklist, self.run_dir)
        self.view.stop([str(p) for p in paths])
        if failure:
            self.err.write(f"sglang-lxc: {failure}\n")
        elif code is ExitCode.ERROR:
            self._show_ansible_error()
        return int(code)

    def end_tree(self) -> None:
        """Interrupted: end every process the run started, ansible-playbook's session too."""
        # ansible-runner starts ansible-playbook as a session leader: its session id is its pid
        pid = self.checklist.run.pid
        sessions = [pid] if pid and pid != os.getpid() else []
        ended = procs.end_tree(os.getpid(), sessions)
        if ended:
            log.info("ended %d processes of the run: %s", len(ended), ended)

    def settle(self, interrupted: bool, rc: int | None) -> ExitCode:
        """What ansible-playbook left unfinished (interrupted, crashed), and the exit code."""
        run = self.checklist.run
        finished_by_callback = run.exit_code is not None and not interrupted
        if finished_by_callback:
            code = self.checklist.outcome(False, rc)
            self.checklist.set_outcome(code)
            run.ansible_rc = rc
            return code
        return ChecklistReducer(self.checklist).finish(interrupted=interrupted, ansible_rc=rc)

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
