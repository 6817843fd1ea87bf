#!/usr/bin/env python3
"""A new container's toolchain + stack with the node cache, and the bytes it takes from the
controller. Prints figures.

Makes lab containers one after another on this machine (the lab's node), each with the node
cache's mounts (wheels read-only, uv's cache read-write), and runs playbooks/toolchain.yml and
playbooks/sglang.yml on it (the default lock, the lab's inventory). For each container it prints
the wall time of that run and the bytes that crossed from the controller's wheelhouse into the
node's wheel folder or into the container. By default the node's wheel folder is the controller
wheelhouse, as in the lab inventory (the lab's node is the controller), and uv's cache on the node
starts empty (--uv-cache, removed afterwards unless --keep-node): the first container fills uv's
cache, the next ones find it warm. --node-dir names a node folder of its own, which the first
container then fills through Ansible's copy (3.8 GB for the default lock: slow on two cores).

    .venv/bin/python benchmarks/new_container.py --vmids 203 204 205

Each container is destroyed after its figures are taken. Not a test: timings on a shared machine
are noisy.

--template VMID compares the two ways to a new container: VMID is converged from nothing (its
figures first), made a template (playbooks/template.yml), and each of --vmids is then cloned from
it (clone_from; --full for full copies): create_s is then `pct clone` to booted and reachable,
toolchain+stack_s what the roles still had to do on the clone. The template is destroyed last.

    .venv/bin/python benchmarks/new_container.py --template 260 --vmids 261 \
        --uv-cache /var/lib/sglang-lxc-lab/node-cache/uv --keep-node

--serve goes on to serving: each container gets the lab's tiny Llama in its model store (made
before the container is, as a node's model store is there before its container) and
playbooks/serve.yml with one CPU instance (SGLang 0.5.12's real engine, as ct200 serves), until
healthy. serve_s is that run; engine_s is the engine's own start, read from the unit's journal of
the current boot (systemd's "Started sglang@cpu0.service" to SGLang's "The server is fired up and
ready to roll!"); ours_s = create_s + toolchain_and_stack_s + serve_s - engine_s, what the clone
and the roles take beyond the engine. With --template, the template serves too before it is
made one (a converged container, serving included: its clones boot serving, and the roles find
only what differs); --bare-template makes it from the toolchain and the stack alone, so that
every clone's serving is converged from nothing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.lablib import (  # noqa: E402  (the repository root is put on the path just above)
    LAB_INVENTORY,
    LabContainer,
    ansible_playbook,
    lab_root,
    node_cache_mounts,
    write_inventory,
)


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


SERVE = {  # one CPU instance of the real engine, as inventory/lab/host_vars/ct200/serve.yml
    "sglang_serve_enabled": True,
    "sglang_serve_device": "cpu",
    "sglang_serve_attention_backend": "torch_native",
    "sglang_serve_model_path": "tiny-llama",
    "sglang_serve_instances": [{"name": "cpu0"}],
    "sglang_serve_extra_args": ["--max-total-tokens", "4096"],
    # the role's report interval (30 s): rounds every 2 s took about 2 CPU s each from the
    # engine's own start on two cores (18 rounds in a 33.5 s start, 2026-12-03)
    "sglang_serve_stall_timeout": 300,
    "sglang_serve_ready_timeout": 900,
}


def journal_time(ct: LabContainer, pattern: str) -> float | None:
    """Unix time of the first line of sglang@cpu0's journal that holds pattern."""
    lines = ct.exec("journalctl", "--no-pager", "-b", "-o", "short-unix", "-u",
                    "sglang@cpu0.service", check=False).stdout.splitlines()
    for line in lines:
        if pattern in line:
            return float(line.split()[0])
    return None


def serve(ct: LabContainer, extra: dict, timing: dict) -> dict:
    """serve.yml with one CPU instance until healthy; the engine's own start from its journal."""
    start = time.monotonic()
    run = ansible_playbook("playbooks/serve.yml", ct.inventory, extra_vars={**extra, **SERVE},
                           args=["--limit", ct.name], env=timing)
    serve_s = time.monotonic() - start
    if run.rc != 0 or "1/1 healthy" not in run.output:
        sys.exit(f"{ct.name}: serving failed:\n{run.output[-4000:]}")
    started = journal_time(ct, "Started sglang@cpu0.service")
    ready = journal_time(ct, "The server is fired up and ready to roll!")
    engine_s = round(ready - started, 1) if started and ready else None
    return {"serve_s": round(serve_s, 1), "engine_s": engine_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vmids", type=int, nargs="+", default=[203, 204, 205])
    ap.add_argument("--node-dir", type=Path,
                    default=Path.home() / ".cache" / "sglang-lxc" / "wheelhouse")
    ap.add_argument("--uv-cache", type=Path, default=lab_root() / "node-cache" / "bench-uv")
    ap.add_argument("--keep-node", action="store_true", help="keep the node folders afterwards")
    ap.add_argument("--set", action="append", default=[], metavar="VAR=JSON",
                    help="an extra variable for the run, e.g. --set sglang_uv_link_mode='\"copy\"'")
    ap.add_argument("--slowest", type=int, default=8, help="how many of the slowest tasks to print")
    ap.add_argument("--template", type=int, help="converge this vmid from nothing, make it a "
                    "template, and clone --vmids from it")
    ap.add_argument("--full", action="store_true", help="full clones instead of linked ones")
    ap.add_argument("--serve", action="store_true",
                    help="then serve the lab's tiny Llama with one CPU instance, until healthy")
    ap.add_argument("--bare-template", action="store_true",
                    help="with --template --serve: the template does not serve (its clones "
                    "converge serving from nothing)")
    args = ap.parse_args()
    for d in (args.node_dir, args.uv_cache):
        d.mkdir(parents=True, exist_ok=True)
    extra = {"sglang_lxc_node_wheelhouse": str(args.node_dir),
             "sglang_lxc_node_uv_cache": str(args.uv_cache)}
    for item in args.set:
        name, _, value = item.partition("=")
        try:
            extra[name] = json.loads(value)
        except json.JSONDecodeError:
            extra[name] = value
    timer = Path(tempfile.mkdtemp(prefix="bench-timer-")) / "plays.json"
    timing = {"ANSIBLE_CALLBACKS_ENABLED":
                  "sglang_lxc.serving.todo,sglang_lxc.serving.gc_freeze,play_timer",
              "ANSIBLE_CALLBACK_PLUGINS": f"{ROOT}/benchmarks/callbacks",
              "PLAY_TIMER_OUT": str(timer)}
    figures = []
    template = None
    vmids = [args.template, *args.vmids] if args.template else args.vmids
    try:
        for n, vmid in enumerate(vmids, 1):
            name = f"ct{vmid}"
            work = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
            address = vmid if vmid < 255 else vmid - 100  # docs/CONVENTIONS.md
            clone = {"clone_from": args.template, "clone_full": args.full} if template else {}
            spec = {"name": name, "vmid": vmid, "ip": f"10.0.3.{address}/24", **clone,
                    "gateway": "10.0.3.1",
                    "mounts": [{"host_path": str(lab_root() / "data" / name / "models"),
                                "path": "/srv/models"},
                               *node_cache_mounts(args.node_dir, args.uv_cache)]}
            ct = LabContainer(vmid, work, spec)
            try:
                ct.destroy()
                write_inventory(ct)
                if args.serve:
                    from ansible_collections.sglang_lxc.serving.runner import lab_model

                    lab_model.make(lab_root() / "data" / name / "models" / "tiny-llama")
                start = time.monotonic()
                made = ct.provision()
                create_s = time.monotonic() - start
                if made.rc != 0:
                    sys.exit(f"{name}: could not make the container:\n{made.output[-3000:]}")
                before = tree_bytes(args.node_dir)
                start = time.monotonic()
                run = ansible_playbook(["playbooks/toolchain.yml", "playbooks/sglang.yml"],
                                       ct.inventory, extra_vars=extra, args=["--limit", name],
                                       env=timing)
                run_s = time.monotonic() - start
                if run.rc != 0:
                    sys.exit(f"{name}: the run failed:\n{run.output[-4000:]}")
                own = ct.exec("sh", "-c", "du -sb /var/cache/sglang-lxc/wheelhouse 2>/dev/null "
                              "| cut -f1 || true", check=False).stdout.strip()
                sent = tree_bytes(args.node_dir) - before + int(own or 0)
                how = ("full clone" if args.full else "linked clone") if clone else "from nothing"
                fig = {"container": n, "name": name, "how": how, "create_s": round(create_s, 1),
                       "toolchain_and_stack_s": round(run_s, 1), "bytes_from_controller": sent,
                       "changed": run.changed}
                if args.serve and not (args.bare_template and vmid == args.template):
                    fig.update(serve(ct, extra, timing))
                figures.append(fig)
                print(json.dumps(fig), flush=True)
                if timer.exists():
                    tasks = json.loads(timer.read_text())["tasks"]
                    for _, task, sec in sorted(tasks, key=lambda t: -t[2])[:args.slowest]:
                        print(f"   {sec:7.1f} s  {task}", flush=True)
                if args.template and vmid == args.template:
                    start = time.monotonic()
                    made = ansible_playbook("playbooks/template.yml", LAB_INVENTORY,
                                            extra_vars={"proxmox_lxc_template_vmid": vmid})
                    if made.rc != 0:
                        sys.exit(f"{name}: could not make the template:\n{made.output[-3000:]}")
                    print(json.dumps({"template": vmid,
                                      "template_s": round(time.monotonic() - start, 1)}))
                    template = ct
            finally:  # a failed run leaves no container behind either
                if ct is not template:
                    ct.destroy()
                    shutil.rmtree(work, ignore_errors=True)
    finally:
        if template is not None:  # after its clones
            template.destroy()
        if not args.keep_node:
            if args.node_dir != Path.home() / ".cache" / "sglang-lxc" / "wheelhouse":
                shutil.rmtree(args.node_dir, ignore_errors=True)
            shutil.rmtree(args.uv_cache, ignore_errors=True)
    print("\ncontainer  how           create_s  toolchain+stack_s  total_s  bytes_from_controller")
    for f in figures:
        total = round(f["create_s"] + f["toolchain_and_stack_s"], 1)
        print(f"{f['container']:>9}  {f['how']:<12}  {f['create_s']:>8}  "
              f"{f['toolchain_and_stack_s']:>17}  {total:>7}  {f['bytes_from_controller']:>21}")
    served = [f for f in figures if "serve_s" in f]
    if served:
        print("\ncontainer  how           to_healthy_s  serve_s  engine_s  ours_s")
    for f in served:
        total = round(f["create_s"] + f["toolchain_and_stack_s"] + f["serve_s"], 1)
        ours = round(total - f["engine_s"], 1) if f["engine_s"] is not None else "?"
        print(f"{f['container']:>9}  {f['how']:<12}  {total:>12}  {f['serve_s']:>7}  "
              f"{f['engine_s']!s:>8}  {ours:>6}")


if __name__ == "__main__":
    main()
