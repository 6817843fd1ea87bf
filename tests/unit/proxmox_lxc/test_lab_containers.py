"""The lab's container specs (plugins/plugin_utils/lab_containers.py, filter in
plugins/filter/lab.py): the node cache's mounts go to every one."""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import lab_containers as lab


def test_every_lab_container_gets_the_node_cache_mounts():
    node = [{"host_path": "/n/wheels", "path": "/var/cache/sglang-lxc/node/wheelhouse",
             "read_only": True},
            {"host_path": "/n/uv", "path": "/var/cache/sglang-lxc/node/uv"}]
    specs = lab.lab_containers(2, "/lab", extra_mounts=node)
    assert [s["name"] for s in specs] == ["ct200", "ct201"]
    for spec in specs:
        assert spec["mounts"][-2:] == node
        assert spec["mounts"][0]["host_path"] == f"/lab/data/{spec['name']}/models"
    specs[0]["mounts"][-1]["path"] = "/changed"  # each spec owns its copy
    assert specs[1]["mounts"][-1]["path"] == "/var/cache/sglang-lxc/node/uv"
    assert len(lab.lab_containers(1, "/lab")[0]["mounts"]) == 3
