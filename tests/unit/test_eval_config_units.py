"""The eval stage's config: its defaults as docs/method.md §7 and docs/reference.md state them, its bounds, the
engine kinds it takes, and the preset's rules (error rule, reader, the release's prompts). Values by hand."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from paravt_core.config import load_config
from paravt_core.eval.config import EvalBenchmarkConfig, EvalConfig

# (preset, error_rule, reader) -> (the error rule in force, the headline's reader)
RESOLVED = [
    ("paravt", "auto", "auto", "paravt", "robust"),
    ("release", "auto", "auto", "release", "release"),
    (
        "release",
        "paravt",
        "auto",
        "paravt",
        "robust",
    ),  # auto reader follows the rule in force, not the preset
    ("paravt", "release", "auto", "release", "release"),
    ("release", "auto", "robust", "release", "robust"),
    ("paravt", "auto", "release", "paravt", "release"),
    ("paravt", "paravt", "robust", "paravt", "robust"),
]


@pytest.mark.parametrize(("preset", "rule", "reader", "rule_now", "reader_now"), RESOLVED)
def test_error_rule_and_reader_resolve_by_the_preset_unless_set(preset, rule, reader, rule_now, reader_now):
    cfg = EvalConfig(preset=preset, error_rule=rule, reader=reader)
    assert (cfg.resolved_error_rule, cfg.resolved_reader) == (rule_now, reader_now)


def test_the_release_preset_writes_its_prompt_set_and_clears_a_pinned_checksum():
    pinned = "sha256:" + "0" * 64
    cfg = EvalConfig(preset="release", agent={"prompt_set_checksum": pinned})
    # the pin was of the default set: with the release's texts written in, it is read again at load
    assert (cfg.agent.prompt_set, cfg.agent.prompt_set_checksum) == ("release-v1", None)
    named = EvalConfig(preset="release", agent={"prompt_set": "paravt-v1", "prompt_set_checksum": pinned})
    assert (named.agent.prompt_set, named.agent.prompt_set_checksum) == ("paravt-v1", pinned)
    ours = EvalConfig(agent={"prompt_set_checksum": pinned})
    assert (ours.agent.prompt_set, ours.agent.prompt_set_checksum) == ("paravt-v1", pinned)


def test_defaults_of_the_eval_stage():
    cfg = EvalConfig()
    assert cfg.protocols == ["agentic"] and cfg.benchmarks == []
    assert (cfg.preset, cfg.error_rule, cfg.reader) == ("paravt", "auto", "auto")
    assert cfg.max_error_share == 0.05  # docs/method.md §7: a share above 0.05 fails the stage
    # greedy main agent and sub-agents
    assert (cfg.agent.temperature, cfg.agent.subagent.temperature) == (0.0, 0.0)
    assert (cfg.runner.concurrency, cfg.runner.retries, cfg.runner.backoff_s) == (8, 3, 1.0)
    assert cfg.runner.upload_every_s == 60.0 and cfg.judge.enabled is True
    assert (cfg.shard, cfg.merge, cfg.expected_shards) == ("", False, 0)
    assert (cfg.engine.kind, cfg.engine.max_batch) == ("transformers", 32)
    b = EvalBenchmarkConfig(name="videomme")
    assert (b.source, b.split, b.media_root, b.subtitles, b.subtitle_mode, b.limit) == (
        "",
        "",
        "",
        "",
        "all",
        None,
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"max_error_share": 1.01},
        {"max_error_share": -0.01},
        {"expected_shards": -1},
        {"output": ""},
        {"runner": {"concurrency": 0}},
        {"runner": {"retries": -1}},
        {"runner": {"backoff_s": -0.5}},
        {"runner": {"upload_every_s": 0.0}},
        {"benchmarks": [{"name": "videomme", "limit": 0}]},
        {"protocols": ["agentic", "tools"]},
        {"preset": "lmms"},
    ],
)
def test_out_of_range_values_are_refused(bad):
    with pytest.raises(ValidationError):
        EvalConfig.model_validate(bad)


def test_edge_values_are_accepted():
    cfg = EvalConfig.model_validate(
        {
            "max_error_share": 1.0,
            "runner": {"retries": 0, "backoff_s": 0.0},
            "benchmarks": [{"name": "x", "limit": 1}],
        }
    )
    assert (cfg.max_error_share, cfg.runner.retries, cfg.benchmarks[0].limit) == (1.0, 0, 1)


def test_the_engine_section_takes_only_kinds_that_evaluate():
    with pytest.raises(ValidationError, match="engine.kind=sglang cannot serve eval: eval has not been run"):
        EvalConfig(engine={"kind": "sglang"})
    with pytest.raises(ValidationError, match="engine.kind='nope' is not an engine kind"):
        EvalConfig(engine={"kind": "nope"})
    # without a kind: the default transformers section, the given fields over its defaults
    cfg = load_config(EvalConfig, overrides=["engine.max_batch=4"])
    assert (cfg.engine.kind, cfg.engine.max_batch) == ("transformers", 4)
    served = EvalConfig(engine={"kind": "openai", "base_url": "http://judge:8000/v1"})
    assert (served.engine.kind, served.engine.base_url) == ("openai", "http://judge:8000/v1")
