"""`make mutation`: mutmut 3 over the pure modules, then the kill rate per module and every survivor.

mutmut (config: ``[tool.mutmut]`` in pyproject.toml) copies ``paravt_core`` into ``mutants/``, runs the
selected test files once to learn which tests reach which function, then runs each mutant against only those
tests. Modules run one after another in the order below (``rewards/accuracy.py`` last: it changes often);
``--only`` picks some. ``mutants/`` keeps the stats pass and the verdicts across runs (``--report`` prints
them); running a module again checks all of its mutants again.
Survivors are either killed by a new test or listed as equivalent in docs/mutation.md.

    .venv/bin/python scripts/mutation.py                      # everything (hours on 2 cores)
    .venv/bin/python scripts/mutation.py --only rl/gating.py  # one module
    .venv/bin/python scripts/mutation.py --report             # print the table from the last runs
    .venv/bin/python scripts/mutation.py --verify tests/test_x.py paravt_core.mod.x_f__mutmut_3 ...
                                               # does this test file kill these mutants? (after a run)
    .venv/bin/python scripts/mutation.py --platform --only train/syncs.py   # a GPU-path / platform module

GPU-path and platform modules (``--platform``, issue 41): their tests start processes, train tiny models and
run SGLang's own code, so one shared selection of test files (mutmut 3 has one ``[tool.mutmut]``) would make
every module's stats pass run all of them. Each gets a scratch root ``build/mutation/<label>/`` instead:
links to the repository's files, and a ``pyproject.toml`` whose ``[tool.mutmut]`` mutates that module only
and selects only its own test files (``PLATFORM`` below). A module marked with a sample runs every k-th of
its mutants (sorted by name; k = ceil(mutants / sample)), and the table says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MUTMUT = str(Path(sys.executable).with_name("mutmut"))

# (module, mutant-name globs). storage.py is mostly S3 I/O: only its path guard is in scope.
MODULES: list[tuple[str, list[str]]] = [
    ("rl/gating.py", ["paravt_core.rl.gating.*"]),
    ("rl/loss.py", ["paravt_core.rl.loss.*"]),
    ("rl/advantages.py", ["paravt_core.rl.advantages.*"]),
    ("rewards/tool.py", ["paravt_core.rewards.tool.*"]),
    ("rewards/format.py", ["paravt_core.rewards.format.*"]),
    ("rewards/compose.py", ["paravt_core.rewards.compose.*"]),
    ("video/timeparse.py", ["paravt_core.video.timeparse.*"]),
    ("video/sampling.py", ["paravt_core.video.sampling.*"]),
    (
        "storage.safe_join",
        ["paravt_core.storage.x_safe_join__mutmut_*", "paravt_core.storage.x_unsafe_name_reason__mutmut_*"],
    ),
    ("eval/records.py", ["paravt_core.eval.records.*"]),
    ("eval/metrics.py", ["paravt_core.eval.metrics.*"]),
    ("agent/parsing.py", ["paravt_core.agent.parsing.*"]),
    ("sft/packing.py", ["paravt_core.sft.packing.*"]),
    ("rewards/accuracy.py", ["paravt_core.rewards.accuracy.*"]),
]


@dataclasses.dataclass(frozen=True)
class Platform:
    """A GPU-path or platform module run in its own scratch root (see the module docstring)."""

    label: str  # as in docs/mutation.md
    path: str  # the file mutated, relative to the repository (``pkg/*``: every file of that folder)
    tests: tuple[str, ...]  # pytest node ids / files: its own tests (the stats pass runs each once)
    sample: int = 0  # 0: every mutant; N: about N of them, every k-th by name
    only: tuple[str, ...] = ()  # mutant-name globs (after the module's prefix): some functions of a module


# the benchmark package's in-process tests (converters, registry, metrics, demo fixtures), shared by its modules
# (with test_eval_release.py's benchmark-layout tests; not the two that only start subprocesses)
REL = "tests/unit/test_eval_release.py::test_"
BENCH_TESTS = (
    "tests/unit/test_eval_benchmarks.py",
    "tests/unit/test_eval_benchmark_registry.py",
    "tests/unit/test_eval_scoring.py",
    "tests/contract/test_eval_demo_data.py",
    "tests/unit/test_eval_benchmarks_units.py",
    *(
        REL + t
        for t in (
            "release_v1_videomme_letters_options_twice_and_direct_asks_differently",
            "release_v1_videomme_subtitles_line_by_line_and_left_out_when_missing",
            "release_v1_lvbench_mlvu_longvideobench_mmvu_layouts",
            "release_v1_mmvu_open_ended_gets_the_letter_forced_answer",
            "mmvu_shows_lmms_evals_all_items_number_beside_ours_labelled",
            "lvbench_rows_with_an_options_list_are_lettered_as_lmms_eval_does",
            "charades_gold_is_scored_as_numbers_not_reparsed_text",
            "longvideobench_note_says_what_the_release_does_with_an_unreadable_answer",
            "videomme_copy_not_named_mp4_is_the_release_error_and_scored_wrong",
            "videomme_wsub_copy_not_named_mp4_is_the_error_before_its_subtitles_are_read",
            "videomme_wsub_question_carries_the_release_subtitle_lines_under_release_only",
            "lvbench_options_list_is_not_shown_under_release",
            "aligned_subtitles_keep_the_cues_covering_the_sampled_frames",
        )
    ),
    "-k",
    "not import_structure and not demo_data_without_fixtures",
)
# (module of eval/benchmarks/, sample: 0 = every mutant)
BENCH_SAMPLES = (
    ("base", 20),
    ("registry", 20),
    ("videomme", 12),
    ("mmvu", 12),
    ("longvideobench", 8),
    ("lvbench", 8),
    ("mlvu", 8),
    ("charades", 8),
    ("demo", 8),
    ("fixture_files", 8),
    ("synthetic", 8),
)
PLATFORM: list[Platform] = [
    # the eval modules: each with its in-process tests (the benchmarks one per module, the large ones sampled)
    Platform(
        "eval/scoring.py",
        "paravt_core/eval/scoring.py",
        (
            "tests/unit/test_eval_scoring.py",
            "tests/unit/test_eval_runner.py",
            "tests/unit/test_eval_scoring_units.py",
        ),
    ),
    Platform(
        "eval/runner.py",
        "paravt_core/eval/runner.py",
        ("tests/unit/test_eval_runner.py", "tests/unit/test_eval_runner_units.py"),
        sample=30,
    ),
    # eval/config.py has no entry: its code is class bodies (fields) and decorated methods (validators,
    # properties), which mutmut 3 leaves alone; its one-line mutants are applied by hand (docs/mutation.md)
    *(
        Platform(
            f"eval/benchmarks/{name}.py", f"paravt_core/eval/benchmarks/{name}.py", BENCH_TESTS, sample=k
        )
        for name, k in BENCH_SAMPLES
    ),
    Platform(
        "eval/tally.py",
        "paravt_core/eval/tally.py",
        (
            "tests/unit/test_eval_benchmark_registry.py",
            "tests/unit/test_eval_scoring.py",
            "tests/unit/test_eval_tally_units.py",
        ),
    ),
    Platform("train/syncs.py", "paravt_core/train/syncs.py", ("tests/unit/test_train_syncs.py",)),
    Platform(
        "cli_errors.py",
        "paravt_core/cli_errors.py",
        (
            "tests/contract/test_cli_errors_units.py",
            "tests/contract/test_cli_errors_units.py::test_tidying_keeps_the_config_beside_a_checkpoint_and_empty_folders",
            "tests/contract/test_cli_errors_units.py::test_the_removed_again_line_names_only_the_output_or_its_parents",
            "tests/contract/test_cli_errors_units.py::test_eval_merge_without_benchmarks_of_its_own_is_accepted",
            "tests/contract/test_cli_bad_inputs.py::test_only_folders_without_results_are_tidied",
            "tests/unit/test_stage_output_owner.py",
        ),
        sample=150,
    ),
    Platform(
        "rl/launch.py",
        "paravt_core/rl/launch.py",
        (
            "tests/contract/test_rl_launch.py",
            "tests/contract/test_rl_fleet.py",
            "tests/contract/test_rl_launch_units.py",
            "tests/contract/test_rl_launch_units.py::test_every_server_of_a_fleet_plan_is_told_the_served_dtype",
            "tests/contract/test_rl_launch_units.py::test_the_launched_server_process_gets_its_pinning",
        ),
        sample=120,
    ),
    Platform(
        "rl/weight_sync.py",
        "paravt_core/rl/weight_sync.py",
        (
            "tests/contract/test_sglang_contract.py",
            "tests/contract/test_served_dtype.py",
            "tests/contract/test_weight_sync_units.py::test_two_group_names_made_in_one_process_differ",
            "tests/contract/test_weight_sync_units.py",
        ),
        sample=60,
    ),
    Platform(
        "rl/stage.py",
        "paravt_core/rl/stage.py",
        (
            "tests/e2e/test_rl_stage.py",
            "tests/contract/test_rl_pinning.py",
            "tests/contract/test_served_dtype.py",
            "tests/unit/test_rl_stage_units.py::test_the_server_the_rl_stage_starts_itself_gets_its_pinning",
            "tests/unit/test_rl_stage_units.py",
            "tests/contract/test_rl_sglang.py",
            "tests/contract/test_push_on_device.py",
            "tests/contract/test_push_interrupt.py",
            "tests/contract/test_rl_fleet.py",
            "tests/e2e/test_rl_fsdp.py",
        ),
        sample=40,
    ),
    Platform(
        "checkpoint.py",
        "paravt_core/checkpoint.py",
        (
            "tests/e2e/test_sft_train.py",
            "tests/e2e/test_rl_resume.py",
            "tests/contract/test_storage_faults.py",
            "tests/contract/test_checkpoint_units.py",
            "tests/contract/test_checkpoint_units.py::test_save_hf_writes_the_saved_tensors_dtype_when_none_is_given",
            "tests/contract/test_checkpoint_units.py::test_saving_a_bf16_copy_leaves_the_live_models_config_float32",
        ),
        sample=60,
    ),
    Platform(
        "models.py",
        "paravt_core/models.py",
        (
            "tests/contract/test_models.py",
            "tests/contract/test_models_units.py",
            "tests/contract/test_models_units.py::test_bars_off_restores_the_callers_state_in_both_directions",
        ),
        sample=100,
    ),
    Platform(
        "engines/sglang_engine.py",
        "paravt_core/engines/sglang_engine.py",
        (
            "tests/contract/test_engines_sglang.py",
            "tests/contract/test_sglang_contract.py",
            "tests/contract/test_rl_sglang.py",
            "tests/unit/test_sglang_engine_units.py",
        ),
        sample=60,
    ),
    Platform(
        "launch/trainjob.py",
        "paravt_core/launch/trainjob.py",
        (
            "tests/contract/test_launch_trainjob.py",
            "tests/contract/test_launch_trainjob_fields.py",
            "tests/contract/test_launch_trainjob_cluster.py",
            "tests/contract/test_launch_sigterm.py",
            "tests/contract/test_stage_retry.py::test_a_multinode_step_recreates_its_failed_job_and_follows_it_to_completion",
        ),
        sample=150,
    ),
    Platform(
        "sft/trainer.py",
        "paravt_core/sft/trainer.py",
        (
            "tests/e2e/test_sft_train.py",
            "tests/unit/test_sft_step_host.py",
            "tests/unit/test_sft_config.py",
            "tests/contract/test_sft_trainer_units.py",
        ),
        sample=40,
    ),
    Platform(
        "eval/stage.py",
        "paravt_core/eval/stage.py",
        (
            "tests/e2e/test_eval_stage.py",
            "tests/unit/test_eval_shards.py",
            "tests/contract/test_eval_stage_units.py",
            "tests/contract/test_eval_stage_units.py::test_a_shard_run_of_a_complete_output_evaluates_its_shard",
            "tests/contract/test_eval_stage_units.py::test_release_preset_aligns_subtitles_to_its_own_frame_count",
        ),
        sample=60,
    ),
    Platform(
        "eval/formats.py",
        "paravt_core/eval/formats.py",
        (
            "tests/unit/test_eval_benchmarks.py",
            "tests/unit/test_eval_release.py",
            "tests/unit/test_eval_runner.py",
            "tests/unit/test_eval_formats_units.py",
        ),
    ),
    Platform(
        "scripts/gpu_check.py",
        "scripts/gpu_check.py",
        (
            "tests/contract/test_gpu_check.py",
            "tests/unit/test_gpu_check_units.py",
            "tests/unit/test_gpu_check_units.py::test_gpu_check_refuses_a_checksum_unless_every_rank_reported_one",
            "tests/unit/test_gpu_check_units.py::test_gpu_check_served_scores_check_which_tokens_were_scored",
            "tests/unit/test_gpu_check_units.py::test_gpu_check_nccl_push_fails_whenever_the_launch_checksum_does_not_come_back",
        ),
        sample=120,
    ),
]
# The release-reproduction code: the release's readers, rescore, comparability, the release's frames, the media
# path. Each with its in-process tests (subprocess probes cannot be attributed by mutmut).
R = "tests/unit/test_eval_readers.py::"
# the tests written for the first runs' survivors of readers, comparability and the media path (run for each)
M = (
    R + "test_release_letter_single_letter_rules",
    R + "test_release_interval_fallback_order",
    R + "test_release_iou_is_over_the_hull_and_zero_for_an_empty_one",
    R + "test_release_score_of_no_reply_reads_nothing",
    "tests/unit/test_eval_report.py::test_comparability_defaults_of_an_old_results_file_name_ours_in_order",
    "tests/unit/test_eval_report.py::test_comparability_charades_subtitles_and_mmvu_lines_are_whole",
    "tests/unit/test_eval_report.py::test_config_differences_lines_are_whole_and_read_only_this_benchmarks_rows",
    "tests/unit/test_eval_report.py::test_config_differences_without_an_engine_kind_name_transformers",
    "tests/contract/test_media_path.py::test_merge_media_scatters_in_the_embeddings_dtype_and_orders_deepstack_rows_by_position",
    "tests/contract/test_media_path.py::test_merge_media_refuses_images_and_videos_with_different_deepstack_depths",
)
PLATFORM += [
    Platform(
        "eval/readers.py",
        "paravt_core/eval/readers.py",
        (
            R + "test_release_letter_follows_extract_letter_line_by_line",
            R + "test_release_interval_follows_extract_time_from_response",
            R + "test_release_score_compares_with_the_stripped_gold_and_scores_intervals_by_its_iou",
            R + "test_the_headline_uses_the_release_reader_under_its_error_rule_and_keeps_ours_beside_it",
            R + "test_charades_headline_reads_intervals_as_the_release_does",
            R + "test_mmvu_release_headline_is_every_item_with_open_ended_read_as_letters_and_errors_wrong",
            "tests/unit/test_eval_oracle.py::test_the_release_rule",
            *M,
        ),
    ),
    Platform(
        "eval/rescore.py",
        "paravt_core/eval/rescore.py",
        (
            R + "test_rescore_rereads_saved_records_offline_with_either_reader",
            "tests/contract/test_eval_rescore.py",
        ),
    ),
    Platform(
        "eval/report.py",
        "paravt_core/eval/report.py",
        (
            R + "test_comparability_names_each_failed_condition",
            R + "test_preset_release_brings_the_release_frame_path_whatever_the_base_agent_says",
            R + "test_comparability_names_every_failure_at_once_and_the_reader",
            "tests/unit/test_eval_release.py::test_comparability_requires_preset_prompts_and_error_rule_and_names_each_failure",
            "tests/unit/test_eval_release.py::test_videomme_wsub_aligned_on_a_real_video_and_labelled_in_the_report",
            *M,
        ),
        only=("x_comparability__mutmut_*", "x__config_differences__mutmut_*"),
    ),
    Platform(
        "video/release_frames.py",
        "paravt_core/video/release_frames.py",
        (
            "tests/contract/test_eval_release_frames.py",
            "tests/unit/test_eval_runner.py::test_release_preset_reproduces_the_released_driver",
        ),
        sample=100,
    ),
    Platform(
        "train/media.py",
        "paravt_core/train/media.py",
        (
            "tests/unit/test_sft_packing.py",
            "tests/contract/test_media_path.py::test_training_refuses_a_language_model_that_would_drop_the_media",
            *M,
        ),
    ),
]
# The agent's episode, the video tool, the stage lifecycle, the reward terms, the frame paths and the KFP
# launchers (a folder's files as one entry: ``path`` ``pkg/*``). The components' bodies are one call each into
# components/launchers (tests/unit/test_component_specs.py pins that), so mutmut mutates the logic there itself.
V = "tests/contract/test_video_bad_input.py::"
PLATFORM += [
    Platform(
        "agent/episode.py",
        "paravt_core/agent/episode.py",
        (
            "tests/unit/test_agent_episode.py",
            "tests/unit/test_agent_episode_safety.py",
            "tests/unit/test_agent_segments.py",
            "tests/unit/test_agent_episode_units.py",
        ),
        sample=60,
    ),
    Platform(
        "video/api.py",
        "paravt_core/video/api.py",
        (
            "tests/unit/test_video_exact.py",
            *(V + t for t in ("test_missing_file", "test_directory_is_not_a_video", "test_zero_byte_file")),
            *(V + t for t in ("test_text_file_named_mp4", "test_one_frame_video", "test_invalid_windows")),
            *(
                V + t
                for t in (
                    "test_tool_returns_errors_as_text",
                    "test_run_crops_keeps_good_windows_next_to_bad_ones",
                )
            ),
            "tests/unit/test_release_driver_crop_clamp.py",
            "tests/unit/test_release_wire_jpeg.py",
            "tests/unit/test_video_display.py",
            "tests/unit/test_video_api_units.py",
        ),
        sample=40,
    ),
    Platform(
        "stage.py",
        "paravt_core/stage.py",
        (
            "tests/unit/test_stage_lifecycle.py",
            "tests/unit/test_stage_config_rule.py",
            "tests/unit/test_stage_output_owner.py",
            "tests/unit/test_stage_units.py",
        ),
        sample=40,
    ),
    Platform(
        "rewards/terms.py",
        "paravt_core/rewards/terms.py",
        ("tests/unit/test_reward_terms.py", "tests/unit/test_reward_terms_units.py"),
        sample=40,
    ),
    Platform(
        "agent/frame_paths/*",
        "paravt_core/agent/frame_paths/*",
        ("tests/unit/test_frame_paths.py",),
        sample=30,
    ),
    Platform(
        "components/launchers/*",
        "components/launchers/*",
        (
            "tests/unit/test_component_specs.py",
            "tests/contract/test_multinode_steps.py",
            "tests/contract/test_pipeline_multinode.py",
            "tests/unit/test_rl_component.py",
            # not its compile test (about 90 s): the steps' own refusals
            "tests/contract/test_hardware_defaults.py::test_a_multinode_rl_step_refuses_the_cpu_demo_on_16_gpus",
            "tests/contract/test_hardware_defaults.py::test_a_one_node_rl_step_refuses_the_cpu_demo_in_a_gpu_pod",
            "tests/contract/test_hardware_defaults.py::test_float32_is_refused_at_8b_and_allowed_for_the_tiny_model",
            "tests/unit/test_eval_reserved_gpus.py",
            "tests/unit/test_tracking_manifests.py",
            "tests/unit/test_launchers_units.py",
        ),
        sample=20,
    ),
]
SCRATCH = ROOT / "build" / "mutation"
KILLED = {"killed", "timeout", "segfault", "caught by type check"}
NOT_RUN = {"not checked", "skipped"}


def _env(root: Path = ROOT) -> dict[str, str]:
    # mutmut runs the tests inside mutants/: its copy of paravt_core must win over any installed one.
    # The SGLang and router side sites lie beside the repository's venvs, which mutants/ has not: name them,
    # or the contract and fleet tests skip there (tests/support/sglang_support.py, tests/support/fleet_support.py) and every
    # mutant they would check survives.
    site, router = ROOT / ".venv-bench" / "sglang-site", ROOT / ".venv-router"
    return {
        **({"PARAVT_SGLANG_SITE": str(site)} if site.is_dir() else {}),
        **({"PARAVT_ROUTER_SITE": str(router)} if router.is_dir() else {}),
        **os.environ,
        "PYTHONPATH": str(root / "mutants"),
        "OMP_NUM_THREADS": "1",
        "HYPOTHESIS_PROFILE": "mutation",
    }


def statuses(root: Path = ROOT, prefix: str = "paravt_core.") -> dict[str, str]:
    """mutant name -> status, from ``mutmut results --all true`` (lines ``    name: status``)."""
    if root != ROOT and not (root / "mutants").is_dir():
        return {}
    out = subprocess.run(
        [MUTMUT, "results", "--all", "true"],
        cwd=root,
        env=_env(root),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result = {}
    for line in out.splitlines():
        name, sep, status = line.strip().rpartition(": ")
        if sep and name.startswith(prefix):
            result[name] = status
    return result


# ----------------------------------------------------------------------------- GPU-path / platform modules


def sampling_note(step: int, total: int) -> str:
    """How a run sampled its mutants, for the table: "every 3rd of 220" or "all 220"."""
    if step <= 1:
        return f"all {total}"
    suffix = "th" if 10 <= step % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(step % 10, "th")
    return f"every {step}{suffix} of {total}"


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-")


def _prefix(m: Platform) -> str:
    """mutmut's name prefix of the module's mutants (its dotted path; a folder's ``pkg/*``: the package's)."""
    return m.path.removesuffix("/*").removesuffix(".py").replace("/", ".") + "."


def _toml_list(items: list[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(f'"{x}"' for x in items) + "]"


def scratch_root(m: Platform) -> Path:
    """``build/mutation/<label>/``: links to the repository's entries and a pyproject.toml whose ``[tool.mutmut]``
    mutates ``m.path`` only, checked by ``m.tests`` only (the rest of pyproject.toml as it is)."""
    root = SCRATCH / _slug(m.label)
    root.mkdir(parents=True, exist_ok=True)
    skip = {"pyproject.toml", "mutants", "build", ".git"}
    entries = sorted(p for p in ROOT.iterdir() if p.name not in skip and not p.name.startswith("."))
    for entry in [*entries, ROOT / ".venv"]:
        link = root / entry.name
        if not link.is_symlink() and entry.exists():
            link.symlink_to(entry)
    source = m.path.split("/", 1)[0]
    also = [p.name for p in entries if p.name not in (source, "tests") and not p.name.endswith(".py")]
    project = (ROOT / "pyproject.toml").read_text()
    table_at = re.search(r"^\[tool\.mutmut\]\s*$", project, flags=re.M)  # the table, not a mention of it
    if table_at:
        tail = project[table_at.end() :]
        rest = re.search(r"^\[", tail, flags=re.M)  # the next table after [tool.mutmut], if any
        project = project[: table_at.start()] + (tail[rest.start() :] if rest else "")
    table = (
        "\n[tool.mutmut]\n"
        f'source_paths = ["{source}"]\n'
        f'only_mutate = ["{m.path}"]\n'
        f"also_copy = {_toml_list(also)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:randomly", "-x", "-q"]\n'
        f"pytest_add_cli_args_test_selection = {_toml_list(m.tests)}\n"
        'process_isolation = "forkserver"\n'
        # mutmut's CPU limit is 30 x (the tests' call time + this): the call time leaves out the session
        # fixtures each mutant's pytest sets up again (the tiny model, SGLang's side processes), so with
        # mutmut's 1 s a mutant whose one test is short was stopped before that test ended ("timeout")
        "timeout_constant = 10.0\n"
        "use_git_change_detection = false\n"
    )
    (root / "pyproject.toml").write_text(project.rstrip() + "\n" + table)
    return root


def _in_scope(m: Platform, table: dict[str, str]) -> dict[str, str]:
    """The mutants of ``table`` that ``m.only`` selects (all of them without it)."""
    globs = [_prefix(m) + g for g in m.only]
    return {n: s for n, s in table.items() if not globs or any(fnmatch.fnmatchcase(n, g) for g in globs)}


def run_platform(m: Platform) -> None:
    root = scratch_root(m)
    shutil.rmtree(
        root / "mutants", ignore_errors=True
    )  # from scratch: the module and its tests as they are now
    (root / "mutants").mkdir()
    (root / "sample.txt").unlink(missing_ok=True)
    env = _env(root)
    if not m.sample and not m.only:
        subprocess.run([MUTMUT, "run"], cwd=root, env=env, check=False, stdout=subprocess.DEVNULL)
        return
    # generate the mutants without running any (a name that matches none: mutmut stops, saying so, once they are
    # written), then run a sample of them
    subprocess.run(
        [MUTMUT, "run", _prefix(m) + "none-match"],
        cwd=root,
        env=env,
        check=False,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    names = sorted(_in_scope(m, statuses(root, _prefix(m))))
    step = max(1, math.ceil(len(names) / m.sample)) if m.sample else 1
    chosen = names[::step]
    scope = f" ({', '.join(m.only)})" if m.only else ""
    note = sampling_note(step, len(names))
    (root / "sample.txt").write_text(f"{note}{scope}\n" + "\n".join(chosen) + "\n")
    subprocess.run([MUTMUT, "run", *chosen], cwd=root, env=env, check=False, stdout=subprocess.DEVNULL)


def report_platform(selected: list[Platform]) -> int:
    print(f"{'module':<26}{'mutants':>8}{'run':>6}{'killed':>8}{'survived':>10}{'kill rate':>11}  sampling")
    survivors: list[tuple[str, str]] = []
    for m in selected:
        root = SCRATCH / _slug(m.label)
        table = _in_scope(m, statuses(root, _prefix(m)))
        run = [n for n in table if table[n] not in NOT_RUN]
        killed = [n for n in run if table[n] in KILLED]
        alive = sorted(n for n in run if table[n] not in KILLED)
        survivors += [(f"{m.label}: {n}", table[n]) for n in alive]
        rate = f"{100 * len(killed) / len(run):.1f} %" if run else "not run"
        note = (root / "sample.txt").read_text().splitlines()[0] if (root / "sample.txt").is_file() else "all"
        print(f"{m.label:<26}{len(table):>8}{len(run):>6}{len(killed):>8}{len(alive):>10}{rate:>11}  {note}")
    print(f"\nsurvivors ({len(survivors)}; `cd build/mutation/<label> && mutmut show NAME` prints the diff):")
    for name, status in survivors:
        print(f"  {name}: {status}")
    return 0


def report(selected: list[tuple[str, list[str]]]) -> int:
    table = statuses()
    print(f"{'module':<22}{'mutants':>8}{'killed':>8}{'survived':>10}{'not run':>9}{'kill rate':>11}")
    survivors: list[tuple[str, str]] = []
    for module, globs in selected:
        names = [n for n in table if any(fnmatch.fnmatchcase(n, g) for g in globs)]
        run = [n for n in names if table[n] not in NOT_RUN]
        killed = [n for n in run if table[n] in KILLED]
        alive = sorted(n for n in run if table[n] not in KILLED)
        survivors += [(n, table[n]) for n in alive]
        rate = f"{100 * len(killed) / len(run):.1f} %" if run else "-"
        print(
            f"{module:<22}{len(names):>8}{len(killed):>8}{len(alive):>10}{len(names) - len(run):>9}{rate:>11}"
        )
    print(f"\nsurvivors ({len(survivors)}; `mutmut show NAME` prints the diff):")
    for name, status in survivors:
        print(f"  {name}: {status}")
    return 0


def first_failure(stdout: str) -> str:
    """pytest's first summary line of a failure (``FAILED t.py::x - ...``, ``ERROR t.py::x``), not a
    library's log line that starts with ``ERROR:`` (torch's profiler writes some): "" when none."""
    return next((line for line in stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))), "")


def verify(test_file: str, names: list[str]) -> int:
    """Run ``test_file`` against each named mutant of the last run (mutmut's trampolines pick the mutant from
    ``MUTANT_UNDER_TEST``) and print KILLED / SURVIVED per mutant: the check that a new test kills the
    survivor it was written for, in seconds, without a new stats pass. The file must pass with no mutant."""
    platform = [m for m in PLATFORM if names and names[0].startswith(_prefix(m))]
    root = SCRATCH / _slug(platform[0].label) if platform else ROOT  # a platform module: its scratch root
    prefix = _prefix(platform[0]) if platform else "paravt_core."
    short = [n for n in names if not n.startswith(prefix)]
    if short:  # a name that matches no module's prefix silently runs the original code
        raise SystemExit(
            f"mutant names are full ({prefix}<name>, as --report prints them), one module at a time: {short}"
        )
    if not (root / "mutants" / prefix.split(".")[0]).is_dir():
        raise SystemExit("no mutants/ yet: run `make mutation MODULES=...` for the module first")
    # inside mutants/, where the mutated paravt_core is the one imported (a test's own helpers too)
    copy = root / "mutants" / "tests" / f"_verify_{os.getpid()}_{Path(test_file).name}"
    shutil.copyfile(test_file, copy)
    try:

        def run(mutant: str) -> subprocess.CompletedProcess[str]:
            cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider"]
            env = {**_env(root), "MUTANT_UNDER_TEST": mutant}
            return subprocess.run(
                [*cmd, str(copy)], cwd=root / "mutants", env=env, capture_output=True, text=True
            )

        baseline = run("")
        if baseline.returncode != 0:
            print(baseline.stdout[-3000:])
            raise SystemExit(f"{test_file} fails with no mutant: fix it first")
        survived = 0
        for name in names:
            out = run(name)
            first = first_failure(out.stdout)
            verdict = "SURVIVED" if out.returncode == 0 else "KILLED  "
            survived += out.returncode == 0
            print(f"{verdict} {name}  {first.replace(copy.name, Path(test_file).name)}".rstrip(), flush=True)
        return 1 if survived else 0
    finally:
        copy.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="module label (repeatable), e.g. rl/loss.py")
    ap.add_argument("--report", action="store_true", help="only print the table of the last runs")
    ap.add_argument(
        "--verify", nargs="+", metavar=("TEST_FILE", "MUTANT"), help="run TEST_FILE against each named mutant"
    )
    ap.add_argument("--platform", action="store_true", help="the GPU-path and platform modules (PLATFORM)")
    args = ap.parse_args(argv)
    if args.platform:
        known_p = {m.label for m in PLATFORM}
        unknown_p = [m for m in args.only if m not in known_p]
        if unknown_p:
            ap.error(f"unknown module(s) {unknown_p}; known: {sorted(known_p)}")
        chosen = [m for m in PLATFORM if not args.only or m.label in args.only]
        if not args.report:
            for m in chosen:
                print(
                    f"== mutmut run ({'sample ' + str(m.sample) if m.sample else 'all'}): {m.label}",
                    flush=True,
                )
                run_platform(m)
        return report_platform(chosen)
    if args.verify:
        if len(args.verify) < 2:
            ap.error("--verify needs a test file and at least one mutant name")
        return verify(args.verify[0], args.verify[1:])
    known = {m for m, _ in MODULES}
    unknown = [m for m in args.only if m not in known]
    if unknown:
        ap.error(f"unknown module(s) {unknown}; known: {sorted(known)}")
    selected = [(m, g) for m, g in MODULES if not args.only or m in args.only]
    if not args.report:
        # PYTHONPATH names mutants/: it must exist before Python starts, or the import system caches its absence
        (ROOT / "mutants").mkdir(exist_ok=True)
        for module, globs in selected:
            print(f"== mutmut run: {module}", flush=True)
            subprocess.run(
                [MUTMUT, "run", *globs], cwd=ROOT, env=_env(), check=False, stdout=subprocess.DEVNULL
            )
    return report(selected)


if __name__ == "__main__":
    sys.exit(main())
