"""``cli_errors`` in-process (the subprocess tests in ``test_cli_bad_inputs.py`` cover the same rules through
``paravt``, but a mutation run attributes only in-process calls to a test): every exit status and line of
``classify`` worked out by hand, the folder rules and the preflight checks."""

from __future__ import annotations

import contextlib
import os
import tempfile
import types
from pathlib import Path

import pytest

from paravt_core import cli_errors as ce
from paravt_core.config_base import ConfigError
from paravt_core.eval.stage import EvalError
from pipelines.cluster import ClusterError


def test_one_line_joins_the_non_blank_lines_stripped():
    assert ce.one_line("  a \n\n b\t\n") == "a; b"
    assert ce.one_line("") == "" and ce.one_line(" \n ") == ""
    assert ce.one_line(KeyError("x")) == "'x'"


@pytest.mark.parametrize(
    ("argv", "env", "on"),
    [
        ([], "", False),
        (["--debug"], "", True),
        ([], "1", True),
        ([], " 0 ", False),
        ([], "false", False),
        ([], "yes", True),
        (["--debugger"], "", False),
    ],
)
def test_debug_is_the_flag_or_the_variable(monkeypatch, argv, env, on):
    monkeypatch.setenv("PARAVT_DEBUG", env)
    assert ce.debug_enabled(argv) is on


def test_debug_without_the_variable(monkeypatch):
    monkeypatch.delenv("PARAVT_DEBUG", raising=False)
    assert ce.debug_enabled([]) is False


def _user_error(base: type[BaseException], module: str) -> BaseException:
    """A subclass of one of the project's user errors, as a stage's own refinement of it would be."""
    return type("Sub", (base,), {"__module__": module})("bad row\nline 2")


def _look_alike(name: str, module: str) -> BaseException:
    """A class named like a user error that does not derive from ``ParavtUserError``: not one."""
    cls = type(name, (RuntimeError,), {"__module__": module})
    return type("Sub", (cls,), {"__module__": module})("bad row\nline 2")


HINT = "rerun with --debug (or PARAVT_DEBUG=1) for the traceback"


@pytest.mark.parametrize(
    ("err", "code", "line"),
    [
        (ConfigError("a\nb"), 2, "config error: a; b"),
        (ce.UsageError("no such\npipeline"), 2, "paravt sft: error: no such; pipeline"),
        (FileExistsError("taken"), 2, "paravt sft: error: taken"),
        (NotADirectoryError("f"), 2, "paravt sft: error: f"),
        (FileNotFoundError("gone"), 1, "paravt sft: gone"),
        (PermissionError("no"), 1, "paravt sft: no"),
        (IsADirectoryError("dir"), 1, "paravt sft: dir"),
        (_user_error(EvalError, "paravt_core.eval.stage"), 1, "paravt sft: bad row; line 2"),
        (_user_error(ClusterError, "pipelines.cluster"), 1, "paravt sft: bad row; line 2"),
        (_look_alike("EvalError", "elsewhere"), 1, f"paravt sft: unexpected Sub: bad row; line 2 ({HINT})"),
        (
            _look_alike("EvalError", "paravt_core.eval.stage"),
            1,
            f"paravt sft: unexpected Sub: bad row; line 2 ({HINT})",
        ),
        (
            _look_alike("OtherError", "paravt_core.x"),
            1,
            f"paravt sft: unexpected Sub: bad row; line 2 ({HINT})",
        ),
        (
            RuntimeError("Torch not compiled with CUDA enabled"),
            1,
            "paravt sft: device: Torch not compiled with CUDA enabled; use device=cpu or run where the device is",
        ),
        (
            RuntimeError("CUDA device not available"),
            1,
            "paravt sft: device: CUDA device not available; use device=cpu or run where the device is",
        ),
        (
            RuntimeError("CUDA error: misaligned"),
            1,
            f"paravt sft: unexpected RuntimeError: CUDA error: misaligned ({HINT})",
        ),
        (RuntimeError("not available"), 1, f"paravt sft: unexpected RuntimeError: not available ({HINT})"),
        (MemoryError(), 1, "paravt sft: out of memory; lower the batch or sequence sizes"),
        (ValueError("x" * 400), 1, f"paravt sft: unexpected ValueError: {'x' * 300} ({HINT})"),
    ],
)
def test_classify_by_hand(err, code, line):
    assert ce.classify(err, "sft") == (code, line)


def test_a_device_line_keeps_200_characters():
    err = RuntimeError("CUDA is not available " + "y" * 300)
    code, line = ce.classify(err, "rl")
    assert code == 1
    assert (
        line
        == f"paravt rl: device: {('CUDA is not available ' + 'y' * 300)[:200]}; use device=cpu or run where the device is"
    )


def test_storage_errors_by_hand(monkeypatch):
    import botocore.exceptions as bce

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert ce.classify(bce.NoCredentialsError(), "data") == (
        1,
        "paravt data: storage: no S3 credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
    )
    assert ce.classify(bce.PartialCredentialsError(provider="env", cred_var="x"), "data")[1].startswith(
        "paravt data: storage: no S3 credentials found"
    )
    reach = "paravt data: storage: cannot reach the S3 endpoint{}; check AWS_ENDPOINT_URL and the network"
    assert ce.classify(bce.EndpointConnectionError(endpoint_url="http://s3:9"), "data") == (
        1,
        reach.format(" http://s3:9"),
    )
    timeout = bce.ConnectTimeoutError(endpoint_url="")
    assert ce.classify(timeout, "data") == (1, reach.format(""))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://env:1")
    assert ce.classify(timeout, "data") == (1, reach.format(" http://env:1"))
    closed = bce.ConnectionClosedError(endpoint_url="http://c:2")
    assert ce.classify(closed, "data") == (1, reach.format(" http://c:2"))
    denied = bce.ClientError({"Error": {"Code": "AccessDenied", "Message": "nope"}}, "GetObject")
    assert ce.classify(denied, "data") == (1, "paravt data: storage: S3 GetObject failed: AccessDenied: nope")
    bare = bce.ClientError({}, "")
    assert ce.classify(bare, "data") == (1, f"paravt data: storage: S3 request failed: ?: {bare}")
    other = bce.ParamValidationError(report="bad bucket")
    assert ce.classify(other, "data") == (1, f"paravt data: storage: {other}")


def test_network_errors_by_hand():
    import huggingface_hub.errors as hfe
    import requests

    long = "z" * 300
    offline = hfe.LocalEntryNotFoundError(long)
    assert ce.classify(offline, "eval") == (
        1,
        f"paravt eval: network: cannot download from the Hugging Face hub ({long[:200]}); "
        "check the network, HF_HUB_OFFLINE, or point the source at a local copy",
    )
    assert ce.classify(hfe.OfflineModeIsEnabled("off"), "eval")[1].startswith(
        "paravt eval: network: cannot download from the Hugging Face hub (off); "
    )
    response = types.SimpleNamespace(headers={}, status_code=404, request=None, url="u")
    missing = hfe.RepositoryNotFoundError("r" * 300, response=response)
    assert ce.classify(missing, "eval") == (
        1,
        f"paravt eval: network: the Hugging Face hub refused the repository ({'r' * 200}); "
        "check the id and HF_TOKEN",
    )
    gated = hfe.GatedRepoError("gated", response=response)
    assert "refused the repository (gated" in ce.classify(gated, "eval")[1]
    http = hfe.HfHubHTTPError("500 boom", response=response)
    assert ce.classify(http, "eval") == (1, "paravt eval: network: Hugging Face hub error: 500 boom")
    assert ce.classify(requests.ConnectionError(long), "eval") == (1, f"paravt eval: network: {long[:200]}")
    assert ce.classify(requests.Timeout("slow"), "eval") == (1, "paravt eval: network: slow")


def test_only_loaded_libraries_are_consulted(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "botocore.exceptions", None)
    monkeypatch.setitem(sys.modules, "huggingface_hub.errors", None)
    monkeypatch.setitem(sys.modules, "requests", None)
    assert ce._storage_message(RuntimeError("x")) is None
    assert ce._network_message(RuntimeError("x")) is None
    assert ce.classify(RuntimeError("x"), "sft") == (1, f"paravt sft: unexpected RuntimeError: x ({HINT})")


def test_written_dirs_are_output_and_every_dir_field_at_any_depth():
    cfg = {
        "output": "out",
        "work_dir": "w",
        "sft_output": "in",  # an input
        "data": {"input": "d", "cache_dir": "c", "empty_dir": "", "s3_dir": "s3://b/x"},
        "list": [{"output": "o2"}, ("t", {"staging_dir": "s"})],
        "n_dir": 3,
    }
    assert ce._written_dirs(cfg) == ["out", "w", "c", "o2", "s"]


def test_new_local_dirs_are_the_topmost_missing_ancestors(tmp_path):
    existing = tmp_path / "there"
    existing.mkdir()
    cfg = types.SimpleNamespace(
        model_dump=lambda: {
            "output": str(tmp_path / "a" / "b" / "c"),
            "work_dir": str(tmp_path / "a" / "w"),
            "cache_dir": str(existing),
            "x_dir": str(tmp_path / "z"),
        }
    )
    assert ce.new_local_dirs(cfg) == [str(tmp_path / "a"), str(tmp_path / "z")]
    assert ce.new_local_dirs(object()) == []


def test_prune_unused_keeps_symlinks_files_and_missing_roots(tmp_path):
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    file = tmp_path / "file"
    file.write_text("x")
    bare = tmp_path / "bare"
    (bare / "e1" / "e2").mkdir(parents=True)
    (bare / "config.yaml").write_text("a: 1\n")
    (bare / "e1" / "config.yaml").write_text("a: 1\n")
    assert ce.prune_unused([str(link), str(file), str(tmp_path / "none"), str(bare)]) == [str(bare)]
    assert (real / "sub").is_dir() and file.is_file() and not bare.exists()


def test_a_config_yaml_that_is_a_folder_or_a_link_is_kept(tmp_path):
    folder = tmp_path / "f"
    (folder / "config.yaml").mkdir(parents=True)
    (folder / "config.yaml" / "x").write_text("1")
    linked = tmp_path / "l"
    linked.mkdir()
    (linked / "config.yaml").symlink_to(tmp_path / "f" / "config.yaml" / "x")
    assert ce.prune_unused([str(folder), str(linked)]) == []
    assert (folder / "config.yaml" / "x").is_file() and (linked / "config.yaml").is_symlink()


def test_prune_unused_tolerates_a_folder_it_cannot_list(tmp_path, monkeypatch):
    bare = tmp_path / "bare"
    bare.mkdir()

    def refuse(path):
        raise PermissionError(path)

    monkeypatch.setattr(ce.os, "scandir", refuse)
    assert ce.prune_unused([str(bare), str(bare)]) == []


def test_check_device_by_hand(monkeypatch):
    import torch

    ns = types.SimpleNamespace
    for ok in ("cpu", "auto", "meta", "mps", "mps:0", "xpu:1", "", None):
        ce.check_device(ns(device=ok, engine=ns(device="cpu")))
    with pytest.raises(ce.UsageError, match=r"^unknown device 'gpu'; expected cpu, cuda or cuda:N$"):
        ce.check_device(ns(device="cpu", engine=ns(device="gpu")))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ce.PreflightError) as err:
        ce.check_device(ns(device="cuda:1"))
    assert str(err.value) == (
        "device=cuda:1 but no CUDA GPU is visible here (torch.cuda.is_available() is False); "
        "use device=cpu or run on a GPU machine"
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    ce.check_device(ns(device="cuda:1"))
    ce.check_device(ns(device="cuda"))
    with pytest.raises(ce.PreflightError, match=r"^device=cuda:2 but only 2 GPU\(s\) are visible$"):
        ce.check_device(ns(device="cuda:2"))


def test_nearest_existing_and_check_writable(tmp_path):
    assert ce._nearest_existing(str(tmp_path / "a" / "b")) == str(tmp_path)
    assert ce._nearest_existing("/") == "/"
    ce.check_writable("")
    ce.check_writable("s3://bucket/x")
    ce.check_writable(str(tmp_path / "new" / "out"))
    assert not (tmp_path / "new").exists() and not list(tmp_path.iterdir())  # the probe left nothing
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(ce.PreflightError, match=f"^output {file}/out: {file} is a file, not a directory"):
        ce.check_writable(str(file / "out"))
    try:  # what the system says to a folder made in /proc (the probe's own failure, worked out here)
        tempfile.mkdtemp(dir="/proc")
        reason = ""
    except OSError as made:
        reason = made.strerror
    with pytest.raises(ce.PreflightError) as err:
        ce.check_writable("/proc/x")
    assert (
        reason
        and str(err.value) == f"output /proc/x: cannot write in /proc ({reason}); choose another output"
    )


def test_empty_and_s3_outputs_are_not_probed_wherever_the_process_runs(monkeypatch):
    monkeypatch.chdir("/proc")  # a relative probe would land in /proc and fail
    ce.check_writable("")
    ce.check_writable("s3://bucket/x")


def test_check_writable_names_a_folder_it_may_not_write(tmp_path, monkeypatch):
    monkeypatch.setattr(ce.os, "access", lambda *a, **k: False)  # what access() says to a non-root user
    with pytest.raises(ce.PreflightError) as err:
        ce.check_writable(str(tmp_path / "out"))
    assert str(err.value) == f"output {tmp_path}/out: {tmp_path} is not writable; choose another output"


def test_output_owner_from_the_marker_or_the_files(tmp_path):
    from paravt_core import storage

    assert ce.output_owner(str(tmp_path / "none")) is None
    for name, owner in (
        ("results.json", "eval"),
        ("report.md", "report"),
        ("audit.json", "data"),
        ("trajectories", "rl"),
        ("loss_curve.png", "sft"),
        ("other.txt", None),
    ):
        out = tmp_path / name.replace(".", "-")
        out.mkdir()
        (out / name).write_text("x")
        storage.mark_complete(str(out))
        assert ce.output_owner(str(out)) == owner, name
    named = tmp_path / "named"
    named.mkdir()
    (named / "results.json").write_text("x")
    storage.mark_complete(str(named), {"stage": "report"})
    assert ce.output_owner(str(named)) == "report"
    ce.check_output_owner("report", str(named))
    ce.check_output_owner("eval", "")
    with pytest.raises(ce.UsageError) as err:
        ce.check_output_owner("eval", str(named))
    assert str(err.value) == (
        f"output {named} holds a complete report result; give the eval stage its own output (output=...)"
    )


def test_check_model_dir_by_hand(tmp_path):
    ce.check_model_dir("model=", None)
    ce.check_model_dir("model=", "s3://b/m")
    ce.check_model_dir("model=", str(tmp_path / "missing"))  # a hub id or a later download
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    ce.check_model_dir("model=", str(model))
    stage = tmp_path / "stage"
    (stage / "final").mkdir(parents=True)
    (stage / "final" / "config.json").write_text("{}")
    with pytest.raises(ce.UsageError) as err:
        ce.check_model_dir("model=", str(stage))
    assert (
        str(err.value)
        == f"model={stage} is a stage output, not a model (no config.json); did you mean {stage}/final?"
    )
    with pytest.raises(ce.UsageError) as err:
        ce.check_model_dir("model.uri=", str(tmp_path))
    assert str(err.value) == (
        f"model.uri={tmp_path}: no config.json there (a Hugging Face checkpoint folder is expected)"
    )


def test_a_uri_is_never_read_as_a_local_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s3:" / "bucket" / "m").mkdir(parents=True)  # "s3://bucket/m" read as a relative path
    ce.check_model_dir("model=", "s3://bucket/m")


def test_old_markers_are_read_by_their_files_on_s3_too(s3_bucket):
    from paravt_core import storage

    out = f"{s3_bucket}/eval-out"
    storage.write_bytes(f"{out}/results.json", b"{}")
    storage.mark_complete(out)
    assert ce.output_owner(out) == "eval"


def test_preflight_of_a_config_without_an_output():
    ce.preflight("data", types.SimpleNamespace())


def test_check_benchmarks_names_the_nearest_known_one(tmp_path):
    from paravt_core.eval.benchmarks import REGISTRY
    from tests.support.eval_support import tiny_eval_config

    ok = tiny_eval_config(tmp_path, "tiny", [{"name": "mlvu"}])
    ce.check_benchmarks(ok)
    demo = tiny_eval_config(tmp_path, "tiny", [], demo_data=str(tmp_path))
    ce.check_benchmarks(demo)
    bench = types.SimpleNamespace
    near = types.SimpleNamespace(
        benchmarks=[bench(name="mlvu"), bench(name="videome")], demo_data="", merge=False
    )
    with pytest.raises(ce.UsageError) as err:
        ce.check_benchmarks(near)
    assert (
        str(err.value)
        == f"unknown benchmark 'videome'; did you mean 'videomme'? known: {', '.join(REGISTRY)}"
    )
    far = types.SimpleNamespace(benchmarks=[bench(name="qqqqq")], demo_data="", merge=False)
    with pytest.raises(ce.UsageError) as err:
        ce.check_benchmarks(far)
    assert str(err.value) == f"unknown benchmark 'qqqqq'; known: {', '.join(REGISTRY)}"


def test_preflight_for_report_needs_something_to_report(tmp_path):
    cfg = types.SimpleNamespace(
        output=str(tmp_path / "r"),
        eval_outputs=[],
        sft_output="",
        rl_output="",
        trend=types.SimpleNamespace(results_prefix=""),
    )
    with pytest.raises(ce.UsageError) as err:
        ce.preflight("report", cfg)
    assert str(err.value) == (
        "nothing to report: set eval_outputs=[...], sft_output=, rl_output= or trend.results_prefix="
    )
    for field, value in (("eval_outputs", ["e"]), ("sft_output", "s"), ("rl_output", "r")):
        ce.preflight("report", types.SimpleNamespace(**{**vars(cfg), field: value}))
    ce.preflight(
        "report", types.SimpleNamespace(**{**vars(cfg), "trend": types.SimpleNamespace(results_prefix="p")})
    )


def test_preflight_checks_the_model_fields(tmp_path):
    stage = tmp_path / "stage"
    (stage / "final").mkdir(parents=True)
    (stage / "final" / "config.json").write_text("{}")
    sft_like = types.SimpleNamespace(output=str(tmp_path / "o"), model=types.SimpleNamespace(uri=str(stage)))
    with pytest.raises(ce.UsageError, match=r"^model=.* is a stage output"):
        ce.preflight("sft", sft_like)
    rl_like = types.SimpleNamespace(output=str(tmp_path / "o"), model="", reference_model=str(stage))
    with pytest.raises(ce.UsageError, match=r"^reference_model=.* is a stage output"):
        ce.preflight("rl", rl_like)
    out = tmp_path / "taken"
    out.mkdir()
    from paravt_core import storage

    storage.mark_complete(str(out), {"stage": "eval"})
    with pytest.raises(ce.UsageError, match="holds a complete eval result"):
        ce.preflight("rl", types.SimpleNamespace(output=str(out)))
    with pytest.raises(ce.UsageError, match="unknown device"):
        ce.preflight("rl", types.SimpleNamespace(output=str(out), device="tpu"))
    assert Path(out).is_dir()


# 8 ----------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _scandir_sorted(reverse: bool):
    """``os.scandir`` yielding names in a fixed order (the file system's own order is not ours to choose)."""
    import paravt_core.cli_errors as cli_errors

    real = os.scandir

    def scandir(path):
        with real(path) as it:
            return contextlib.nullcontext(sorted(it, key=lambda e: e.name, reverse=reverse))

    cli_errors.os.scandir = scandir
    try:
        yield
    finally:
        cli_errors.os.scandir = real


@pytest.mark.parametrize("reverse", [False, True], ids=["a-z", "z-a"])
def test_tidying_keeps_the_config_beside_a_checkpoint_and_empty_folders(tmp_path, reverse):
    from paravt_core.cli_errors import prune_unused

    out = tmp_path / "out"
    for empty in ("a-empty", "z-empty"):  # an empty folder is scanned last in either order
        (out / empty).mkdir(parents=True)
    (out / "checkpoint-1").mkdir()
    (out / "checkpoint-1" / "model.bin").write_bytes(b"weights")
    (out / "config.yaml").write_text("x: 1\n")
    with _scandir_sorted(reverse):
        assert prune_unused([str(out)]) == []
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "checkpoint-1", "checkpoint-1/model.bin", "config.yaml"
    ]  # fmt: skip


def test_the_removed_again_line_names_only_the_output_or_its_parents(tmp_path):
    from paravt_core.cli_errors import tidied_output_line

    root = str(tmp_path / "run-1")
    line = f"paravt sft: removed {root} again (it held only this failed run's config)"
    assert tidied_output_line("sft", root, [root]) == line
    assert tidied_output_line("sft", f"{root}/out", [root]) == line
    assert tidied_output_line("sft", f"file://{root}/out", [root]) == line
    assert tidied_output_line("sft", str(tmp_path / "run-10"), [root]) is None  # a sibling sharing the prefix
    assert tidied_output_line("sft", str(tmp_path / "run-1x" / "out"), [root]) is None
    assert tidied_output_line("sft", "s3://bucket/run-1", [root]) is None
    assert tidied_output_line("sft", "", [root]) is None


# 9 ----------------------------------------------------------------------------------------------------------
def test_eval_merge_without_benchmarks_of_its_own_is_accepted(tmp_path):
    from paravt_core.cli_errors import UsageError, preflight
    from tests.support.eval_support import tiny_eval_config

    preflight("eval", tiny_eval_config(tmp_path / "m", "tiny", [], merge=True))
    with pytest.raises(UsageError, match="no benchmarks configured"):
        preflight("eval", tiny_eval_config(tmp_path / "n", "tiny", []))
