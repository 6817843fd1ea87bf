"""Module sglang_unit_recover: units that crashed before the run are reset and started again,
with recorded ``systemctl show`` outputs of systemd 252 (no systemd needed)."""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
    sglang_unit_recover as recover_utils,
)
from serve_helpers import ROOT

from tests.loaders import load_file

recover = recover_utils.recover
SHOW = ["systemctl", "show", f"--property={recover_utils.SHOW_PROPS}", "--"]
NOW = 86400.0  # CLOCK_MONOTONIC of "now", seconds; systemd's timestamps are microseconds

# systemctl show prints the properties in its own order, not in the order asked
AUTO_RESTART_AFTER_SIGKILL = """\
Result=signal
NRestarts=0
ExecMainExitTimestampMonotonic=86388000000
ExecMainCode=2
ExecMainStatus=9
ActiveState=activating
SubState=auto-restart
InvocationID=4c7e1a0b2d3e4f5a6b7c8d9e0f1a2b3c
"""
FAILED_START_LIMIT = """\
Result=start-limit-hit
NRestarts=5
ExecMainExitTimestampMonotonic=86100000000
ExecMainCode=1
ExecMainStatus=1
ActiveState=failed
SubState=failed
InvocationID=9f8e7d6c5b4a39281706f5e4d3c2b1a0
"""
FAILED_EXIT_1 = """\
Result=exit-code
NRestarts=0
ExecMainExitTimestampMonotonic=86397000000
ExecMainCode=1
ExecMainStatus=1
ActiveState=failed
SubState=failed
InvocationID=0a1b2c3d4e5f60718293a4b5c6d7e8f9
"""
ACTIVE = """\
Result=success
NRestarts=0
ExecMainExitTimestampMonotonic=0
ExecMainCode=0
ExecMainStatus=0
ActiveState=active
SubState=running
InvocationID=1234567890abcdef1234567890abcdef
"""
INACTIVE = """\
Result=success
NRestarts=0
ExecMainExitTimestampMonotonic=0
ExecMainCode=0
ExecMainStatus=0
ActiveState=inactive
SubState=dead
InvocationID=
"""
SHOWN = {
    "sglang@killed.service": AUTO_RESTART_AFTER_SIGKILL,
    "sglang@limit.service": FAILED_START_LIMIT,
    "sglang@exit1.service": FAILED_EXIT_1,
    "sglang@up.service": ACTIVE,
    "sglang@stopped.service": INACTIVE,
}
LAST_LINES = {
    "4c7e1a0b2d3e4f5a6b7c8d9e0f1a2b3c": "[2025-12-07 10:02:11] Scheduler hit an exception\n",
    "9f8e7d6c5b4a39281706f5e4d3c2b1a0":
        "json.decoder.JSONDecodeError: Expecting ',' delimiter: line 3 column 5 (char 40)\n",
    "0a1b2c3d4e5f60718293a4b5c6d7e8f9": "",
}


class Systemd:
    """Answers systemctl show and journalctl from the recordings; records every command."""

    def __init__(self, fail: tuple[str, ...] = ()) -> None:
        self.commands: list[list[str]] = []
        self.fail = fail

    def __call__(self, argv: list[str]) -> tuple[int, str, str]:
        self.commands.append(argv)
        if argv[:4] == SHOW[:4]:
            return 0, SHOWN[argv[-1]], ""
        if argv[0] == "journalctl":
            invocation = next(a for a in argv if a.startswith("_SYSTEMD_INVOCATION_ID="))
            return 0, LAST_LINES[invocation.split("=", 1)[1]], ""
        if argv[1] in self.fail:
            return 1, "", f"Job for {argv[2]} failed because the control process exited.\n"
        return 0, "", ""


def journal(invocation: str) -> list[str]:
    return ["journalctl", "--no-pager", "-o", "cat", "-q",
            f"_SYSTEMD_INVOCATION_ID={invocation}", "-n", "1"]


def run(units, check_mode=False, systemd=None):
    systemd = systemd or Systemd()
    return recover(units, check_mode, systemd, lambda: NOW), systemd.commands


def test_auto_restart_after_sigkill_is_reset_and_restarted_at_once():
    result, commands = run(["sglang@killed.service"])
    assert commands == [
        [*SHOW, "sglang@killed.service"],
        journal("4c7e1a0b2d3e4f5a6b7c8d9e0f1a2b3c"),
        ["systemctl", "reset-failed", "sglang@killed.service"],
        ["systemctl", "restart", "sglang@killed.service"],  # start would wait out RestartSec
    ]
    assert result["changed"] is True
    entry = result["recovered"]["sglang@killed.service"]
    assert entry["text"] == (
        "restarted: it had crashed 12 s before this run (killed by signal 9); "
        "last log: [2025-12-07 10:02:11] Scheduler hit an exception"
    )
    assert entry["summary"] == "restarted: it had crashed 12 s before this run (killed by signal 9)"
    assert entry["status"] == "signal 9 (KILL)"
    assert entry["cause"] == "killed by signal 9"
    assert (entry["action"], entry["result"], entry["crashed_s"]) == ("restart", "signal", 12)
    assert entry["state"] == "activating/auto-restart"
    assert result["msg"] == f"sglang@killed.service: {entry['text']}"
    assert result["commands"] == commands[2:]


def test_failed_at_its_start_limit_is_reset_and_started():
    result, commands = run(["sglang@limit.service"])
    assert commands[2:] == [
        ["systemctl", "reset-failed", "sglang@limit.service"],  # else start is refused
        ["systemctl", "start", "sglang@limit.service"],
    ]
    entry = result["recovered"]["sglang@limit.service"]
    assert entry["text"] == (
        "restarted: it had crashed 5 min before this run (exit status 1) and hit its start "
        "limit; last log: json.decoder.JSONDecodeError: Expecting ',' delimiter: line 3 column 5"
        " (char 40)"
    )
    assert (entry["result"], entry["status"], entry["restarts"]) == (
        "start-limit-hit", "exit status 1", 5)


def test_failed_with_exit_status_1_and_no_log_line():
    result, commands = run(["sglang@exit1.service"])
    assert commands == [
        [*SHOW, "sglang@exit1.service"],
        journal("0a1b2c3d4e5f60718293a4b5c6d7e8f9"),
        ["systemctl", "reset-failed", "sglang@exit1.service"],
        ["systemctl", "start", "sglang@exit1.service"],
    ]
    entry = result["recovered"]["sglang@exit1.service"]
    assert entry["text"] == "restarted: it had crashed 3 s before this run (exit status 1)"
    assert entry["last_log"] == ""


def test_active_and_stopped_units_are_left_alone():
    result, commands = run(["sglang@up.service", "sglang@stopped.service"])
    assert commands == [[*SHOW, "sglang@up.service"], [*SHOW, "sglang@stopped.service"]]
    assert result == {"changed": False, "recovered": {}, "commands": [],
                      "msg": "no unit had crashed before this run"}


def test_only_the_crashed_units_of_several_in_order():
    result, commands = run(["sglang@up.service", "sglang@killed.service",
                            "sglang@stopped.service", "sglang@limit.service"])
    assert [c for c in commands if c[0] == "systemctl" and c[1] != "show"] == [
        ["systemctl", "reset-failed", "sglang@killed.service"],
        ["systemctl", "restart", "sglang@killed.service"],
        ["systemctl", "reset-failed", "sglang@limit.service"],
        ["systemctl", "start", "sglang@limit.service"],
    ]
    assert list(result["recovered"]) == ["sglang@killed.service", "sglang@limit.service"]


def test_check_mode_reports_and_runs_nothing():
    result, commands = run(["sglang@killed.service", "sglang@limit.service", "sglang@up.service"],
                           check_mode=True)
    assert all(c[0] == "journalctl" or c[1] == "show" for c in commands)  # reads only
    assert result["changed"] is True
    assert result["commands"] == [
        ["systemctl", "reset-failed", "sglang@killed.service"],
        ["systemctl", "restart", "sglang@killed.service"],
        ["systemctl", "reset-failed", "sglang@limit.service"],
        ["systemctl", "start", "sglang@limit.service"],
    ]
    assert result["recovered"]["sglang@killed.service"]["summary"] == (
        "restarted: it had crashed 12 s before this run (killed by signal 9)")


def test_a_refused_start_fails_with_what_the_unit_had_been():
    result, _ = run(["sglang@exit1.service"], systemd=Systemd(fail=("start",)))
    assert result["failed"] is True
    assert result["msg"] == (
        "systemctl start sglang@exit1.service failed (rc 1): Job for sglang@exit1.service "
        "failed because the control process exited; it had crashed 3 s before this run "
        "(exit status 1)"
    )


def test_exit_and_age_wording():
    show = {"ExecMainCode": "3", "ExecMainStatus": "11"}
    assert recover_utils.exit_of(show) == ("signal 11 (SEGV)", "killed by signal 11, core dumped")
    assert recover_utils.exit_of({"ExecMainCode": "2", "ExecMainStatus": "99"})[0] == "signal 99"
    assert recover_utils.crashed_seconds_ago({"ExecMainExitTimestampMonotonic": "0"}, NOW) is None
    assert [recover_utils.format_age(s) for s in (0, 119, 120, 7199, 7200, 3 * 86400)] == [
        "0 s", "119 s", "2 min", "119 min", "2 h", "3 d"]
    entry = recover_utils.describe({"ExecMainCode": "1", "ExecMainStatus": "2",
                                    "Result": "exit-code"}, None, "")
    assert entry["text"] == "restarted: it had crashed before this run (exit status 2)"


def test_the_module_file_loads_and_takes_the_units():
    module = load_file("sglang_unit_recover_module",
                       ROOT / "plugins/modules/sglang_unit_recover.py")
    assert module.ARGUMENT_SPEC == {"units": {"type": "list", "elements": "str", "required": True}}
