"""``make mutation PLATFORM=1`` (scripts/mutation.py): every GPU-path / platform module named there exists with
the test files and tests it names, and its scratch root's pyproject.toml holds exactly one ``[tool.mutmut]``
mutating that module only, checked by those tests only (mutmut itself is not run here)."""

from __future__ import annotations

import ast
import sys
import tomllib

import pytest

from tests.support.paths import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import mutation  # noqa: E402

GPU_PATH = {  # the GPU-path and platform modules
    "rl/weight_sync.py", "rl/launch.py", "rl/stage.py", "checkpoint.py", "models.py", "engines/sglang_engine.py",
    "launch/trainjob.py", "cli_errors.py", "sft/trainer.py", "train/syncs.py", "eval/stage.py", "eval/formats.py",
    "components/launchers/*", "scripts/gpu_check.py",
}  # fmt: skip
# the release-reproduction code (readers, rescore, comparability, release frames, media path)
RELEASE_CODE = {
    "eval/readers.py",
    "eval/rescore.py",
    "eval/report.py",
    "video/release_frames.py",
    "train/media.py",
}
# the agent's episode, the video tool, the stage lifecycle, the reward terms and the frame paths
AGENT_AND_STAGE = {"agent/episode.py", "video/api.py", "stage.py", "rewards/terms.py", "agent/frame_paths/*"}
# the eval modules an audit found under-tested: scoring, the runner, the tally and every benchmark module
EVAL = {"eval/scoring.py", "eval/runner.py", "eval/tally.py"} | {
    f"eval/benchmarks/{name}.py"
    for name in ("base", "registry", "videomme", "mmvu", "longvideobench", "lvbench", "mlvu", "charades", "demo",
                 "fixture_files", "synthetic")
}  # fmt: skip


def test_every_gpu_path_and_release_module_is_listed_once():
    labels = [m.label for m in mutation.PLATFORM]
    assert sorted(labels) == sorted(GPU_PATH | RELEASE_CODE | AGENT_AND_STAGE | EVAL)


def test_a_scope_keeps_only_the_mutants_of_the_named_functions():
    report = next(m for m in mutation.PLATFORM if m.label == "eval/report.py")
    names = ["x_comparability__mutmut_3", "x__config_differences__mutmut_12", "x_render_html__mutmut_1",
             "x__fmt__mutmut_2", "xǁReportǁcomparability__mutmut_1"]  # fmt: skip
    table = {f"paravt_core.eval.report.{n}": "killed" for n in names}
    assert sorted(mutation._in_scope(report, table)) == [
        "paravt_core.eval.report.x__config_differences__mutmut_12", "paravt_core.eval.report.x_comparability__mutmut_3"]  # fmt: skip
    readers = next(m for m in mutation.PLATFORM if m.label == "eval/readers.py")
    assert mutation._in_scope(readers, table) == table  # no scope: every mutant


@pytest.mark.parametrize("module", mutation.PLATFORM, ids=lambda m: m.label)
def test_module_and_its_tests_exist(module):
    if module.path.endswith("/*"):  # a folder's files: a package with modules of its own
        assert (ROOT / module.path[:-2] / "__init__.py").is_file() and len(list(ROOT.glob(module.path))) > 2
    else:
        assert (ROOT / module.path).is_file()
    assert module.path.endswith(module.label)
    nodes = list(module.tests)
    if "-k" in nodes:  # a pytest option and its expression, not a test file
        at = nodes.index("-k")
        assert at == len(nodes) - 2 and nodes[at + 1], nodes
        nodes = nodes[:at]
    for node in nodes:
        file, _, name = node.partition("::")
        assert (ROOT / file).is_file(), node
        if name:
            tree = ast.parse((ROOT / file).read_text())
            assert name in {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}, node


def test_scratch_root_holds_one_mutmut_table_for_its_module(tmp_path, monkeypatch):
    monkeypatch.setattr(mutation, "SCRATCH", tmp_path)
    module = next(m for m in mutation.PLATFORM if m.label == "scripts/gpu_check.py")
    root = mutation.scratch_root(module)
    text = (root / "pyproject.toml").read_text()
    assert text.count("\n[tool.mutmut]\n") == 1
    config = tomllib.loads(text)
    mut = config["tool"]["mutmut"]
    assert mut["source_paths"] == ["scripts"] and mut["only_mutate"] == ["scripts/gpu_check.py"]
    assert mut["pytest_add_cli_args_test_selection"] == list(module.tests)
    assert mut["timeout_constant"] == 10.0  # the session fixtures' set-up, left out of the tests' call time
    site = ROOT / ".venv-bench" / "sglang-site"  # named: mutants/ has no .venv-bench beside it
    monkeypatch.delenv("PARAVT_SGLANG_SITE", raising=False)
    assert mutation._env(root).get("PARAVT_SGLANG_SITE") == (str(site) if site.is_dir() else None)
    router = ROOT / ".venv-router"
    monkeypatch.delenv("PARAVT_ROUTER_SITE", raising=False)
    assert mutation._env(root).get("PARAVT_ROUTER_SITE") == (str(router) if router.is_dir() else None)
    assert "paravt_core" in mut["also_copy"] and "tests" not in mut["also_copy"]
    assert config["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]  # the rest of the file kept
    assert (root / "paravt_core").resolve() == ROOT / "paravt_core"
    assert mutation._prefix(module) == "scripts.gpu_check."
    assert mutation._slug(module.label) == "scripts-gpu-check-py"


def test_a_folder_entry_mutates_every_file_of_its_package(tmp_path, monkeypatch):
    monkeypatch.setattr(mutation, "SCRATCH", tmp_path)
    module = next(m for m in mutation.PLATFORM if m.label == "components/launchers/*")
    mut = tomllib.loads((mutation.scratch_root(module) / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert mut["source_paths"] == ["components"] and mut["only_mutate"] == ["components/launchers/*"]
    assert mutation._prefix(module) == "components.launchers."  # the mutants' names of every launcher
    assert mutation._slug(module.label) == "components-launchers"


def test_the_sampling_note_spells_its_ordinal():
    """The table's sampling column: "every 3rd", "every 12th", "every 21st"; a step of 1 ran them all."""
    note = mutation.sampling_note
    assert [note(k, 220) for k in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 111)] == [
        "all 220", "every 2nd of 220", "every 3rd of 220", "every 4th of 220", "every 11th of 220",
        "every 12th of 220", "every 13th of 220", "every 21st of 220", "every 22nd of 220",
        "every 23rd of 220", "every 111th of 220",
    ]  # fmt: skip


def test_verify_names_the_failed_test_not_a_log_line():
    out = (
        "ERROR:2026-11-28 DeviceProperties.cpp:56] gpuGetDeviceCount failed\nFAILED tests/t.py::test_a - x\n"
    )
    assert mutation.first_failure(out) == "FAILED tests/t.py::test_a - x"
    assert mutation.first_failure("ERROR tests/t.py::test_b\n") == "ERROR tests/t.py::test_b"
    assert mutation.first_failure("1 passed\n") == ""
