"""The argument check's plumbing: which variable SGLang's refusal is about, and its failures.

SGLang's parser itself runs in the lab (tests/integration/jit), in the serving venv.
"""

from __future__ import annotations

import sys

from serve_helpers import ROOT, serve_instances

from tests.loaders import load_file

check = load_file("sglang_server_args_check", ROOT / "plugins/modules/sglang_server_args_check.py")

SETTINGS = {"model_path": "m", "served_model_name": "m", "multithread_load": True,
            "enable_metrics": True, "attention_backend": "flashinfer"}


def instance(**changes):
    [resolved] = serve_instances.sglang_serve_instances({**SETTINGS, **changes}, 1)
    return resolved


def test_every_argument_names_the_variable_it_came_from():
    resolved = instance(extra_args=["--chunked-prefill-size", "8192"], mem_fraction_static=0.8)
    assert len(resolved["argv_from"]) == len(resolved["argv"])
    origin = dict(zip(resolved["argv"], resolved["argv_from"], strict=True))
    assert origin["--model-path"] == "sglang_serve_model_path"
    assert origin["--port"] == "sglang_serve_port_base"
    assert origin["--tp"] == "sglang_serve_gpus"
    assert origin["--mem-fraction-static"] == "sglang_serve_mem_fraction_static"
    assert origin["--chunked-prefill-size"] == "sglang_serve_extra_args"
    assert origin["8192"] == "sglang_serve_extra_args"


def test_an_explicit_instance_names_its_own_keys():
    [resolved] = serve_instances.sglang_serve_instances(
        {**SETTINGS, "instances": [{"name": "a", "gpus": [0], "extra_args": ["--x"]}]}, 1)
    origin = dict(zip(resolved["argv"], resolved["argv_from"], strict=True))
    assert origin["--x"] == "sglang_serve_instances[0] (a).extra_args"
    assert origin["--tp"] == "sglang_serve_instances[0] (a).gpus"


def test_secrets_and_a_second_config_are_refused_on_the_command_line():
    for bad, word in ((["--api-key", "k"], "--api-key"), (["--admin-api-key=k"], "--admin-api-key"),
                      (["--config", "x.yaml"], "--config")):
        try:
            instance(extra_args=bad)
        except serve_instances.ServeConfigError as exc:
            assert "sglang_serve_extra_args" in str(exc) and word in str(exc)
        else:
            raise AssertionError(f"{bad} accepted")


def test_blame_an_invalid_value_on_the_extra_argument():
    resolved = instance(extra_args=["--chunked-prefill-size=8192; touch /tmp/x"])
    error = "argument --chunked-prefill-size: invalid int value: '8192; touch /tmp/x'"
    message = check.refusal_message(resolved, error)
    assert message.startswith(
        'sglang_serve_extra_args = ["--chunked-prefill-size=8192; touch /tmp/x"] '
        "(sglang@gpu0.service): SGLang's own parser refuses them: " + error)
    assert "Nothing was written or restarted" in message


def test_blame_unrecognized_arguments_and_an_option_with_aliases():
    resolved = instance(extra_args=["--chnked-prefill", "8192"])
    blamed = check.blame(resolved["argv"], resolved["argv_from"],
                         "unrecognized arguments: --chnked-prefill 8192")
    assert blamed == [("sglang_serve_extra_args", ["--chnked-prefill", "8192"])]
    blamed = check.blame(resolved["argv"], resolved["argv_from"],
                         "argument --tensor-parallel-size/--tp-size/--tp: invalid int value: 'x'")
    assert blamed == [("sglang_serve_gpus", ["--tp", "1"])]


def test_an_error_no_argument_explains_still_names_the_instance():
    resolved = instance()
    message = check.refusal_message(resolved, "the following arguments are required: --x")
    assert message.startswith("the arguments of gpu0 (sglang@gpu0.service)")


def test_a_venv_without_sglang_fails_with_the_reason():
    result = check.run_check({"python": sys.executable, "instances": [instance()],
                              "config": {"api-key": "secret"}, "timeout": 60})
    assert result["failed"]
    assert "cannot run SGLang's parser" in result["msg"] and "sglang" in result["msg"]
    assert "secret" not in result["msg"]
    result = check.run_check({"python": "/nonexistent/python", "instances": [instance()],
                              "config": {}, "timeout": 60})
    assert result["failed"] and "/nonexistent/python" in result["msg"]


def test_a_refused_config_option_is_named_by_its_variable_never_its_value():
    message = check.refusal_message(instance(), "argument --api-key: expected one argument",
                                    {"api-key": "sglang_serve_api_key"})
    assert message.startswith("sglang_serve_api_key (in the --config file; value hidden)")


def test_the_deploy_record_holds_what_runs_not_where_it_came_from():
    per_gpu = serve_instances.sglang_serve_instances(SETTINGS, 1)
    explicit = serve_instances.sglang_serve_instances(
        {**SETTINGS, "instances": [{"name": "gpu0", "gpus": [0]}]}, 1)
    assert per_gpu[0]["argv_from"] != explicit[0]["argv_from"]
    assert serve_instances.sglang_serve_deployed(per_gpu) == serve_instances.sglang_serve_deployed(
        explicit)


def fake_venv(tmp_path, name):
    """A venv whose python answers as the parse script does, counting its runs."""
    release = tmp_path / "venvs" / name / "bin"
    release.mkdir(parents=True)
    python = release / "python"
    python.write_text(
        "#!/bin/sh\ncat > /dev/null\necho run >> \"$(dirname \"$0\")/runs\"\n"
        "echo '{\"results\": [{\"name\": \"gpu0\", \"ok\": true}], \"import_seconds\": 1}'\n"
    )
    python.chmod(0o755)
    link = tmp_path / "venv"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(release.parent)
    return str(link / "bin" / "python"), release / "runs"


def verdict(params):
    kept = check.cached_verdict(params)
    if kept is not None:
        return "cached"
    result = check.run_check(params)
    check.keep_verdict(params, result)
    return "failed" if result.get("failed") else "parsed"


def test_an_accepted_verdict_is_kept_by_arguments_and_release(tmp_path):
    python, runs = fake_venv(tmp_path, "0.5.12-aaaa")
    params = {"python": python, "instances": [instance()], "config": {"api-key": "sk-secret-9"},
              "cache_dir": str(tmp_path / "cache"), "timeout": 10}
    assert verdict(params) == "parsed"
    assert verdict(params) == "cached"
    assert runs.read_text().count("run") == 1
    assert "sk-secret-9" not in "".join(p.read_text() for p in (tmp_path / "cache").iterdir())
    assert verdict({**params, "config": {"api-key": "other"}}) == "parsed"
    assert verdict({**params, "instances": [instance(mem_fraction_static=0.5)]}) == "parsed"
    python2, runs2 = fake_venv(tmp_path, "0.5.13-bbbb")  # the same venv path, a new release
    assert python2 == python
    assert verdict(params) == "parsed"
    assert runs2.read_text().count("run") == 1


def test_a_refusal_is_never_kept(tmp_path):
    params = {"python": sys.executable, "instances": [instance()], "config": {},
              "cache_dir": str(tmp_path / "cache"), "timeout": 60}
    assert verdict(params) == "failed"  # no SGLang in this python
    assert not (tmp_path / "cache").exists()
