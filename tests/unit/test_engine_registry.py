"""The engine registry (``engines/registry.py``): one config class per kind, told apart by ``engine.kind`` in
every stage; the kinds each stage takes; the weight-update protocols the server engines implement, checked
against their real methods' signatures; ``engines.build`` making the in-process engine from the tiny model."""

from __future__ import annotations

import inspect

import pytest
from pydantic import BaseModel

from paravt_core.cli_help import describe_fields
from paravt_core.config import ConfigError, config_to_yaml, load_config
from paravt_core.engines.base import ReloadsFromDisk, ServerProcess, UpdatesOverGroup
from paravt_core.engines.fleet import FleetEngine
from paravt_core.engines.openai_engine import OpenAIEngine
from paravt_core.engines.registry import KINDS, BuildContext, build, check_kind, kinds_for
from paravt_core.engines.sglang_engine import SGLangEngine, SGLangServer
from paravt_core.engines.vllm_engine import VllmEngine
from paravt_core.eval.config import EvalConfig
from paravt_core.rl.config import RlConfig


def test_each_kind_is_named_by_its_config_class() -> None:
    assert list(KINDS) == ["transformers", "sglang", "vllm", "openai"]
    for name, kind in KINDS.items():
        assert kind.config.model_fields["kind"].default == name
        assert kind.config().kind == name  # a section of just `kind: NAME` is valid


def test_each_stage_takes_the_kinds_that_can_serve_it() -> None:
    assert [k.name for k in kinds_for("rl")] == ["transformers", "sglang", "vllm"]
    assert [k.name for k in kinds_for("eval")] == ["transformers", "vllm", "openai"]
    assert [k.name for k in kinds_for("agent")] == ["transformers", "sglang", "vllm", "openai"]
    with pytest.raises(ConfigError, match="^engine.kind=openai cannot serve rl: .*token ids and log-probs"):
        check_kind("rl", "openai")
    with pytest.raises(
        ConfigError, match="^engine.kind='nope' is not an engine kind: one of transformers, sglang"
    ):
        check_kind("eval", "nope")


def test_a_stage_config_holds_only_the_chosen_kinds_fields() -> None:
    vllm = load_config(RlConfig, None, ["engine.kind=vllm", "engine.base_url=http://h:8000"])
    assert type(vllm.engine).__name__ == "VllmEngineConfig" and vllm.engine.pause_mode == "wait"
    sglang = load_config(RlConfig, None, ["engine.kind=sglang", "engine.weight_sync=distributed"])
    assert (sglang.engine.weight_sync, sglang.engine.bucket_mb, sglang.engine.pause_mode) == (
        "distributed",
        1024,
        "retract",
    )
    with pytest.raises(
        ConfigError, match=r"^engine.base_url is a field of engine.kind=sglang / vllm, not of "
    ):
        load_config(RlConfig, None, ["engine.base_url=http://h:8000"])  # the default kind: transformers
    with pytest.raises(
        ConfigError, match=r"^engine.mem_fraction_static is a field of engine.kind=sglang, not of "
    ):
        load_config(RlConfig, None, ["engine.kind=vllm", "engine.mem_fraction_static=0.5"])
    pushed = load_config(
        RlConfig, None, ["engine.kind=vllm", "engine.weight_sync=distributed", "engine.nccl_port=1"]
    )
    assert (pushed.engine.weight_sync, pushed.engine.nccl_port) == (
        "distributed",
        1,
    )  # both server kinds push so
    with pytest.raises(ConfigError, match="engine.kind=sglang cannot serve eval"):
        load_config(EvalConfig, None, ["engine.kind=sglang"])


def test_the_stage_defaults_of_a_kind_survive_naming_it() -> None:
    """RL's in-process engine batches 64 requests (the kind's own default is 32): naming the kind, or the old
    top-level ``engine_batch_size``, keeps the stage's value unless it is set."""
    assert RlConfig().engine.max_batch == 64
    assert load_config(RlConfig, None, ["engine.kind=transformers"]).engine.max_batch == 64
    assert load_config(RlConfig, None, ["engine_batch_size=12"]).engine.max_batch == 12
    assert EvalConfig().engine.max_batch == 32


@pytest.mark.parametrize("overrides", [
    ["engine.kind=transformers", "engine.max_batch=8"],
    ["engine.kind=sglang", "engine.servers=2", "engine.base_url=http://r:30000", "engine.worker_urls=[http://a:1]"],
    ["engine.kind=vllm", "engine.base_url=http://h:8000", "engine.pause_mode=abort"],
], ids=["transformers", "sglang", "vllm"])  # fmt: skip
def test_a_saved_config_loads_back_as_the_same_kind(tmp_path, overrides: list[str]) -> None:
    cfg = load_config(RlConfig, None, overrides)
    saved = tmp_path / "rl.yaml"
    saved.write_text(config_to_yaml(cfg))
    again = load_config(RlConfig, saved)
    assert again == cfg and type(again.engine) is type(cfg.engine)


def test_help_lists_every_kinds_fields_under_its_name() -> None:
    lines = describe_fields(RlConfig)
    assert "engine.kind = transformers   (choice; one of transformers, sglang, vllm)" in lines
    at = {line.strip(): i for i, line in enumerate(lines)}
    assert at["when engine.kind=sglang:"] < at["engine.nccl_port = 29600   (int; >= 1, <= 65535)"]
    assert at["when engine.kind=vllm:"] < at["engine.pause_mode = wait   (choice; one of wait, abort)"]
    assert "engine.max_batch = 64   (int; >= 1)" in at  # the stage's default, not the class's 32


def _takes(call, protocol_call) -> bool:
    """``call`` accepts every call ``protocol_call`` describes: the same positional parameters in order, and
    each of its keyword-only names (other keywords the engine takes may have defaults)."""
    mine, theirs = (list(inspect.signature(c).parameters.values()) for c in (protocol_call, call))
    positional = [p.name for p in mine if p.kind is p.POSITIONAL_OR_KEYWORD]
    if [p.name for p in theirs if p.kind is p.POSITIONAL_OR_KEYWORD][: len(positional)] != positional:
        return False
    keywords = {p.name for p in theirs if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
    required = {p.name for p in theirs if p.kind is p.KEYWORD_ONLY and p.default is p.empty}
    wanted = {p.name for p in mine if p.kind is p.KEYWORD_ONLY}
    return wanted <= keywords and required <= wanted


def _implements(cls: type, protocol: type) -> list[str]:
    """The protocol's methods ``cls`` lacks or would not take as the pushes call them."""
    return [
        name
        for name, member in vars(protocol).items()
        if callable(member)
        and not name.startswith("_")
        and (getattr(cls, name, None) is None or not _takes(getattr(cls, name), member))
    ]


@pytest.mark.parametrize(
    ("cls", "protocol"),
    [
        (SGLangEngine, UpdatesOverGroup),
        (SGLangEngine, ReloadsFromDisk),
        (FleetEngine, ReloadsFromDisk),
        (VllmEngine, ReloadsFromDisk),
        (VllmEngine, UpdatesOverGroup),
    ],
)
def test_the_server_engines_take_the_calls_the_pushes_make(cls: type, protocol: type) -> None:
    assert _implements(cls, protocol) == [] and _implements(cls, ReloadsFromDisk) == []


def test_a_chat_only_engine_takes_no_push() -> None:
    assert _implements(OpenAIEngine, ReloadsFromDisk) == [
        "pause_generation",
        "update_weights_from_disk",
        "continue_generation",
    ]
    assert isinstance(SGLangServer(["true"], "http://127.0.0.1:1"), ServerProcess)


def test_build_makes_the_in_process_engine_from_the_checkpoint(tiny_model_dir: str) -> None:
    from paravt_core.engines.transformers_engine import TransformersEngine

    cfg = load_config(EvalConfig, None, ["engine.max_batch=5", "engine.dtype=bfloat16"]).engine
    engine = build(cfg, BuildContext(stage="eval", model=tiny_model_dir, purpose="evaluated model"))
    assert isinstance(engine, TransformersEngine) and engine.max_batch_size == 5
    assert {str(p.dtype) for p in engine.model.parameters()} == {"torch.bfloat16"}
    assert str(next(engine.model.parameters()).device) == "cpu"  # engine.device empty: the stage's


def test_build_gives_a_chat_server_the_stage_model_as_its_name(tiny_model_dir: str) -> None:
    cfg = load_config(
        EvalConfig, None, ["engine.kind=openai", "engine.base_url=http://127.0.0.1:9/v1"]
    ).engine
    engine = build(cfg, BuildContext(stage="eval", model=tiny_model_dir, timeout_s=7.0))
    assert isinstance(engine, OpenAIEngine) and not isinstance(engine, VllmEngine)
    assert (engine.model, engine.timeout_s, engine.max_concurrency) == (tiny_model_dir, 7.0, 16)
    assert engine.processor is not None  # loaded from the checkpoint beside the model, never downloaded


def test_every_kind_config_is_a_strict_section() -> None:
    for kind in KINDS.values():
        assert issubclass(kind.config, BaseModel)
        with pytest.raises(ValueError, match="Extra inputs are not permitted"):
            kind.config(no_such_field=1)


def test_only_a_kind_that_cannot_start_its_server_needs_a_url() -> None:
    needs = {name: kind.needs_url(kind.config()) for name, kind in KINDS.items()}
    assert needs == {"transformers": False, "sglang": False, "vllm": False, "openai": True}
    assert not KINDS["openai"].needs_url(KINDS["openai"].config(base_url="http://h:1/v1"))
