# Copyright: sglang-lxc contributors
# Apache-2.0
"""Run the sgl-kernel wheel build detached on the target, one build per slot, with progress;
then install the wheel it built, import it, and stamp the install with the build's inputs.

Why an action plugin: a build takes up to an hour. It must (a) run detached so an SSH hiccup does
not kill it, (b) show that it is alive (objects compiled, or the log's last line) while it runs,
(c) stop at a timeout, and (d) never run beside another build on the same Proxmox node. Ansible's
own async + async_status gives (a) and (c) but neither (b) nor (d): `throttle` only limits how many
hosts run a task, and an async launch returns at once. Here the slot is a lock file on the
controller, held for the whole build, so it also covers builds started by separate runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

PROGRESS = re.compile(r"\[(\d+)/(\d+)\]")
SLOT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def progress_of(log_tail: str) -> str:
    """'37/120 objects: <last line>' from ninja/make output, else the last line."""
    lines = [ln.strip() for ln in log_tail.splitlines() if ln.strip()]
    last = lines[-1][:160] if lines else "(no output yet)"
    matches = PROGRESS.findall(log_tail)
    if matches:
        done, total = matches[-1]
        return f"{done}/{total} objects compiled; last: {last}"
    return f"last: {last}"


def _fmt(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _unit(output: str) -> str:
    """The source a compile's object is of: CMakeFiles/x.dir/csrc/gemm/a.cu.o -> csrc/gemm/a.cu."""
    rest = output.split(".dir/", 1)[-1]
    return rest[:-2] if rest.endswith(".o") else rest


def ninja_log_entries(text: str) -> dict[str, float]:
    """{output: seconds it took} from ninja's .ninja_log (v5+: start end mtime output hash, ms)."""
    done: dict[str, float] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if line.startswith("#") or len(fields) < 4:
            continue
        try:
            done[fields[3]] = max(0.0, (int(fields[1]) - int(fields[0])) / 1000)
        except ValueError:
            continue
    return done


def compile_progress(configured: dict, ninja_log: str, jobs: int, log_tail: str) -> str:
    """'compiled 12/64, last: csrc/gemm/...; 3m05s per unit, about 2h41m left at 2 jobs'.

    Counts the compiles the configured build.ninja holds (the check's configured.json), found
    done in ninja's own log, and estimates from the measured time per finished unit. Before the
    check has run (configure), the log's last line.
    """
    outputs = configured.get("compile_outputs")
    if not outputs:
        return progress_of(log_tail)
    times = ninja_log_entries(ninja_log)
    order = [o for o in times if o in set(outputs)]  # the log is in order of completion
    total, done = len(outputs), len(order)
    if not order:
        return f"compiled 0/{total}; first units running, no time per unit yet"
    line = f"compiled {done}/{total}, last: {_unit(order[-1])}"
    if done >= total:
        return f"{line}; linking"
    per_unit = sum(times[o] for o in order) / done
    left = (total - done) * per_unit / max(1, jobs)
    return f"{line}; {_fmt(per_unit)} per unit, about {_fmt(left)} left at {max(1, jobs)} job(s)"


def wheel_version(wheel: str) -> str:
    """Version field of a wheel file name (name-version-...-tag.whl)."""
    parts = os.path.basename(wheel).split("-")
    if len(parts) < 5 or not wheel.endswith(".whl"):
        raise ValueError(f"not a wheel file name: {wheel!r}")
    return parts[1]


def stamp_of(inputs: dict, wheel: str, cap: dict, elapsed_s: float) -> dict:
    """The stamp of an installed build: what went in (compared on the next run) and what ran."""
    return {
        "inputs": inputs,
        "version": wheel_version(wheel),
        "wheel": os.path.basename(wheel),
        "build": {
            "jobs": cap.get("jobs"),
            "limited_by": cap.get("limited_by"),
            "elapsed_s": elapsed_s,
        },
    }


def install_command(python: str, wheel: str) -> list[str]:
    """pip installs exactly this wheel over the stack's, offline, nothing else touched."""
    return [
        python,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--no-index",
        "--force-reinstall",
        "--disable-pip-version-check",
        wheel,
    ]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        (
            "script",
            "work_dir",
            "environment",
            "timeout",
            "poll",
            "slot",
            "lock_dir",
            "install_python",
            "import_name",
            "stamp_file",
            "inputs",
            "cap",
        )
    )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = self._task.args
        try:
            script = str(args["script"])
            work_dir = str(args["work_dir"])
            environment = dict(args.get("environment") or {})
            timeout = int(args.get("timeout", 14400))
            poll = int(args.get("poll", 30))
            slot = str(args.get("slot", "all"))
            lock_dir = os.path.expanduser(str(args.get("lock_dir", "~/.cache/sglang-lxc/locks")))
            install_python = str(args.get("install_python") or "")
            import_name = str(args.get("import_name") or "")
            stamp_file = str(args.get("stamp_file") or "")
            inputs = dict(args.get("inputs") or {})
            cap = dict(args.get("cap") or {})
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"sglang_kernel_build: bad arguments: {exc}") from exc
        if timeout <= 0:
            raise AnsibleActionFail(f"sglang_kernel_build_timeout must be > 0, got {timeout}")
        if poll <= 0:
            raise AnsibleActionFail(f"sglang_kernel_build_poll must be > 0, got {poll}")
        if not SLOT_NAME.match(slot):
            raise AnsibleActionFail(f"sglang_kernel_build_slot must be a plain name, got {slot!r}")

        host = (task_vars or {}).get("inventory_hostname", "?")
        if stamp_file and not install_python:
            raise AnsibleActionFail("sglang_kernel_build: stamp_file needs install_python")
        if self._task.check_mode:
            result.update(changed=True, msg="check mode: the sgl-kernel build would run")
            return result

        os.makedirs(lock_dir, exist_ok=True)
        lock_path = os.path.join(lock_dir, f"sgl-kernel-build-{slot}.lock")
        start = time.monotonic()
        with open(lock_path, "a+", encoding="utf-8") as lock:
            waited = self._acquire(lock, host, slot, start, timeout, poll)
            try:
                result.update(
                    self._build(
                        host, script, work_dir, environment, time.monotonic(), timeout, poll
                    )
                )
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        result["slot_wait_s"] = round(waited, 1)
        if install_python and not result.get("failed"):
            result.update(
                self._install(host, install_python, import_name, stamp_file, inputs, cap, result)
            )
        return result

    # -- the install ------------------------------------------------------------------------

    def _install(self, host, python, import_name, stamp_file, inputs, cap, built) -> dict:
        """Install the built wheel, prove it imports, then stamp it (the stamp comes last)."""
        q = shlex.quote
        wheel = built["wheel"]
        res = self._sh(" ".join(q(a) for a in install_command(python, wheel)))
        if res.get("rc") != 0:
            return {
                "failed": True,
                "msg": f"sgl-kernel on {host}: pip could not install {wheel}: "
                f"{(res.get('stderr') or res.get('stdout') or '').strip()[-2000:]}",
            }
        out = {"installed": wheel_version(wheel)}
        if import_name:
            res = self._sh(f"{q(python)} -c {q('import ' + import_name)}")
            if res.get("rc") != 0:
                return {
                    "failed": True,
                    "msg": f"sgl-kernel on {host}: the installed wheel does not import "
                    f"({import_name}): {(res.get('stderr') or '').strip()[-2000:]}",
                }
        if stamp_file:
            stamp = stamp_of(inputs, wheel, cap, built.get("elapsed_s", 0))
            text = json.dumps(stamp, indent=4, sort_keys=True) + "\n"
            tmp = f"{stamp_file}.new"
            res = self._sh(
                f"mkdir -p {q(os.path.dirname(stamp_file))} && printf %s {q(text)} > {q(tmp)} "
                f"&& chmod 0644 {q(tmp)} && mv -f {q(tmp)} {q(stamp_file)}"
            )
            if res.get("rc") != 0:
                return {"failed": True, "msg": f"sgl-kernel on {host}: could not write the stamp"}
            out["stamp"] = stamp
        return out

    # -- the build slot ---------------------------------------------------------------------

    def _acquire(self, lock, host, slot, start, timeout, poll) -> float:
        said = 0.0
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                if now - start > timeout:
                    raise AnsibleActionFail(
                        f"sgl-kernel build on {host}: build slot '{slot}' still busy after "
                        f"sglang_kernel_build_timeout={timeout}s"
                    ) from None
                if now - said >= poll:
                    lock.seek(0)
                    holder = lock.read().strip() or "another run"
                    display.display(
                        f"sgl-kernel build on {host}: waiting for build slot '{slot}' "
                        f"(held by {holder})"
                    )
                    said = now
                time.sleep(min(poll, 5))
        lock.seek(0)
        lock.truncate()
        lock.write(f"{host} (pid {os.getpid()})\n")
        lock.flush()
        return time.monotonic() - start

    # -- the build --------------------------------------------------------------------------

    def _sh(self, cmd: str) -> dict:
        return self._low_level_execute_command(cmd, sudoable=True)

    def _build(self, host, script, work_dir, environment, start, timeout, poll) -> dict:
        q = shlex.quote
        env = " ".join(f"{q(str(k))}={q(str(v))}" for k, v in sorted(environment.items()))
        # The build's own shell records its pid once it leads a new session (setsid), and the
        # launch waits for that: returning earlier races the SSH session teardown (SIGHUP to the
        # launching shell's process group) against setsid.
        inner = (
            "echo $$ > build.pid.new && mv build.pid.new build.pid; "
            f"/bin/bash {q(script)} > build.log 2>&1; echo $? > build.status"
        )
        launch = (
            f"cd {q(work_dir)} || exit 2; "
            # A build left running by an interrupted run holds stale inputs: stop it first.
            'if [ -s build.pid ] && kill -0 "$(cat build.pid)" 2>/dev/null; then '
            'kill -s TERM -- "-$(cat build.pid)" 2>/dev/null; sleep 2; '
            'kill -s KILL -- "-$(cat build.pid)" 2>/dev/null; fi; '
            "rm -f build.status build.log build.pid build.pid.new; "
            f"env {env} nohup setsid /bin/bash -c {q(inner)} </dev/null >/dev/null 2>&1 & "
            "i=0; while [ ! -s build.pid ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done; "
            "cat build.pid"
        )
        res = self._sh(launch)
        if res.get("rc") != 0:
            raise AnsibleActionFail(
                f"sgl-kernel build on {host}: could not start {script}: "
                f"{res.get('stderr', '')}{res.get('stdout', '')}"
            )
        pid = res.get("stdout", "").strip()
        if not pid.isdigit():
            raise AnsibleActionFail(f"sgl-kernel build on {host}: no pid from the launch: {pid!r}")
        display.display(
            f"sgl-kernel build on {host}: started (pid {pid}), log {work_dir}/build.log"
        )

        # RUNNING while the build's process group lives; GONE when it vanished without a status
        # (killed from outside, container restarted).
        poll_cmd = (
            f"cd {q(work_dir)} && {{ cat build.status 2>/dev/null || "
            f"{{ kill -s 0 -- -{int(pid)} 2>/dev/null && echo RUNNING; }} || "
            "{ sleep 1; cat build.status 2>/dev/null || echo GONE; }; }; "
            "echo @@SGLK@@; tail -c 8192 build.log 2>/dev/null; "
            "echo @@SGLK@@; cat configured.json 2>/dev/null; "
            "echo @@SGLK@@; cat build/.ninja_log 2>/dev/null; true"
        )
        jobs = int(environment.get("MAX_JOBS") or 1)
        last_shown = ""
        while True:
            time.sleep(min(poll, max(1, timeout)))
            res = self._sh(poll_cmd)
            parts = [*res.get("stdout", "").split("@@SGLK@@"), "", "", ""]
            status, tail, configured, ninja_log = parts[:4]
            status = status.strip()
            try:
                counts = json.loads(configured) if configured.strip() else {}
            except ValueError:
                counts = {}
            elapsed = time.monotonic() - start
            if status and status != "RUNNING":
                break
            if elapsed > timeout:
                self._sh(
                    f"cd {q(work_dir)} && kill -s TERM -- -{int(pid)} 2>/dev/null; sleep 5; "
                    f"kill -s KILL -- -{int(pid)} 2>/dev/null; true"
                )
                raise AnsibleActionFail(
                    f"sgl-kernel build on {host} stopped: it ran past "
                    f"sglang_kernel_build_timeout={timeout}s; log {work_dir}/build.log: "
                    f"{compile_progress(counts, ninja_log, jobs, tail)}"
                )
            shown = compile_progress(counts, ninja_log, jobs, tail)
            display.display(f"sgl-kernel build on {host} ({_fmt(elapsed)}): {shown}")
            last_shown = shown

        tail_lines = [ln for ln in tail.splitlines() if ln.strip()][-40:]
        if status == "GONE":
            return {
                "failed": True,
                "changed": False,
                "rc": -1,
                "log": f"{work_dir}/build.log",
                "log_tail": tail_lines,
                "msg": f"sgl-kernel build on {host} stopped without an exit status (killed?); "
                f"the installed version is untouched; log {work_dir}/build.log",
            }
        rc = int(status) if status.lstrip("-").isdigit() else -1
        out = {
            "rc": rc,
            "elapsed_s": round(time.monotonic() - start, 1),
            "log": f"{work_dir}/build.log",
            "log_tail": tail_lines,
            "progress": compile_progress(counts, ninja_log, jobs, tail) or last_shown,
        }
        if rc != 0:
            out.update(
                failed=True,
                changed=False,
                msg=f"sgl-kernel build on {host} failed (rc {rc}); the installed version is "
                f"untouched; log {work_dir}/build.log",
            )
            return out
        res = self._sh(f"ls -1 {q(work_dir)}/dist/*.whl")
        wheels = [w for w in res.get("stdout", "").split() if w.endswith(".whl")]
        if len(wheels) != 1:
            out.update(
                failed=True, msg=f"sgl-kernel build on {host}: expected one wheel, found {wheels}"
            )
            return out
        display.display(
            f"sgl-kernel build on {host}: built {os.path.basename(wheels[0])} in "
            f"{_fmt(out['elapsed_s'])}"
        )
        out.update(changed=True, wheel=wheels[0])
        return out
