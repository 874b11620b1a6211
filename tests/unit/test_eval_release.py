"""preset=release reproduces the released eval driver (EvolvingLMMs-Lab/ParaVT, commit cf55249,
``paravt/eval/driver.py`` and ``paravt/eval/utils.py``): its crop frame counts, prompt texts and layouts, error
rule and comparability. Expected values are worked out by hand from those files and from
qwen-vl-utils 0.0.14's ``vision_process.py`` (quoted in each test)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from paravt_core.agent.config import AgentConfig
from paravt_core.agent.prompts import load_prompt_set
from paravt_core.eval import benchmarks as B
from paravt_core.eval import protocols, report
from paravt_core.eval.config import EvalBenchmarkConfig, EvalConfig
from paravt_core.eval.formats import release_srt_lines
from paravt_core.eval.metrics import benchmark_metrics
from paravt_core.eval.protocols import preset_agent
from paravt_core.eval.runner import RunOptions, run_one
from paravt_core.eval.server import served_context
from paravt_core.eval.stage import build_results, load_samples, server_report
from paravt_core.synth import Event, write_video
from paravt_core.video import api as video_api
from paravt_core.video.sampling import crop_frame_count

# ---------------------------------------------------------------------------------------------------------
# Item 4: crop frame counts. qwen-vl-utils 0.0.14 smart_nframes (fps branch):
#   min_frames = ceil_by_factor(1, 2) = 2; max_frames = floor_by_factor(16, 2) = 16
#   nframes = total_frames / video_fps * fps, total_frames = floor(end*vfps) - ceil(start*vfps) + 1
#   nframes = floor_by_factor(min(max(nframes, 2), 16), 2)
# At 30 fps: 3 s -> 91 frames -> 3.03 -> 2; 7 s -> 211 -> 7.03 -> 6; 16 s -> 481 -> 16.03 -> 16.
# Ours (nearest even, halves up): 3 s -> 4, 7 s -> 8, 16 s -> 16.


@pytest.mark.parametrize(("seconds", "release", "ours"), [(3.0, 2, 4), (7.0, 6, 8), (16.0, 16, 16)])
def test_crop_frame_count_as_qwen_vl_utils_0_0_14(seconds, release, ours):
    kw = {"fps": 1.0, "min_frames": 1, "max_frames": 16}
    assert crop_frame_count(10.0, 10.0 + seconds, rounding="floor", video_fps=30.0, **kw) == release
    assert crop_frame_count(10.0, 10.0 + seconds, rounding="floor", **kw) == release  # no rate known
    assert crop_frame_count(10.0, 10.0 + seconds, **kw) == ours


def test_crop_frame_count_floor_counts_source_frames_like_qwen():
    # 7.98 s at 25 fps from 0: floor(199.5) - 0 + 1 = 200 frames = 8.0 s -> 8 (seconds alone: 7.98 -> 6)
    kw = {"fps": 1.0, "min_frames": 1, "max_frames": 16, "rounding": "floor"}
    assert crop_frame_count(0.0, 7.98, video_fps=25.0, **kw) == 8
    assert crop_frame_count(0.0, 7.98, **kw) == 6


def test_release_preset_crops_round_down_on_a_real_video(tmp_path):
    path = tmp_path / "v.mp4"
    write_video(path, [Event("circle", "red", 1.0, 20.0, (10, 10, 60, 60))], 20.0, 10.0, (128, 96))
    cfg = preset_agent("release", AgentConfig())
    assert cfg.crop.rounding == "floor" and AgentConfig().crop.rounding == "nearest"
    opts = {"fps": cfg.crop.fps, "min_frames": cfg.crop.min_frames, "max_frames": cfg.crop.max_frames,
            "max_pixels": 64 * 96, "min_pixels": 32 * 32}  # fmt: skip
    counts = [len(c) for c in video_api.run_crops(str(path), [(2, 5), (2, 9), (2, 18)], **opts,
                                                   rounding=cfg.crop.rounding)]  # fmt: skip
    assert counts == [2, 6, 16]
    ours = [len(c) for c in video_api.run_crops(str(path), [(2, 5), (2, 9), (2, 18)], **opts)]
    assert ours == [4, 8, 16]


# ---------------------------------------------------------------------------------------------------------
# Item 1: the release-v1 prompt set. The hashes are sha256 of the driver's own constants at commit cf55249,
# rendered as the driver renders them (GENERAL_AGENTIC_SYSTEM.format(tool_schema=TOOL_SCHEMA) etc.), computed
# from EvolvingLMMs-Lab/ParaVT paravt/eval/driver.py, not from our set.
RELEASE_SYSTEM_SHA256 = {
    "agentic_general": "d51e7e18d1aa2bb0e10add346557fa72a0d572d490425ee419a6da02f2637603",
    "agentic_minimal": "a6933f68e4de6a8da13321a285a267ff73013fd8baea7e1e7a51fbf527093fe4",
    "direct": "5ebc29666ce3c1db4fef150af4f1de57412363f8d8cfb87f9ce6d3bf934586d2",
    "reasoning": "b17c98b728e2fc63884f0ebe09f4e465a41f4b5333adca3838c412cce459fe1e",
}
# paravt-v1's checksum before the optional layout fields existed: adding them must not change it.
PARAVT_V1_CHECKSUM = "sha256:c91d7f015b4c5d7b6e166a832bc48f439af8ae02eaafb28917eccd121b38ba79"
LETTER_ONLY = "Answer with the option letter only."  # utils.py load_samples mcq_instr (not direct)
DIRECT_HINT = (  # utils.py load_samples mcq_instr under prompt_mode == "direct"
    "Think step by step, use crop_video if needed, then provide your answer in <answer>X</answer> tags "
    "where X is the option letter."
)


def _release_ctx(media_root: str = "", subtitles: str = ""):
    from paravt_core.agent.prompts import load_prompt_set
    from paravt_core.eval import benchmarks as B

    return B.Context(media_root, subtitles, texts=load_prompt_set("release-v1").benchmark)


def test_release_v1_system_prompts_are_the_drivers_byte_for_byte():
    import hashlib

    from paravt_core.agent.prompts import load_prompt_set

    ps = load_prompt_set("release-v1")
    got = {m: hashlib.sha256(ps.system_prompt(m).encode()).hexdigest() for m in RELEASE_SYSTEM_SHA256}
    assert got == RELEASE_SYSTEM_SHA256
    general = ps.system_prompt("agentic_general")
    assert "**multiple <tool_call> blocks in one turn**" in general and "Format strictly as:" in general
    assert general.endswith(
        "Always wrap your reasoning in <think> tags and your final answer in <answer> tags."
    )
    assert load_prompt_set("paravt-v1").checksum == PARAVT_V1_CHECKSUM


def test_preset_release_selects_release_v1_unless_a_set_is_named():
    from paravt_core.agent.prompts import load_prompt_set
    from paravt_core.config import load_config
    from paravt_core.eval.config import EvalConfig
    from paravt_core.eval.protocols import RELEASE_PROMPT_SET

    assert EvalConfig(preset="release").agent.prompt_set == RELEASE_PROMPT_SET == "release-v1"
    assert EvalConfig().agent.prompt_set == "paravt-v1"
    named = load_config(EvalConfig, overrides=["preset=release", "agent.prompt_set=paravt-v1"])
    assert named.agent.prompt_set == "paravt-v1"  # named: kept (the report then says the prompts differ)
    # the resolved config names the set, so reloading it (shards, compiled pipelines) keeps it
    again = EvalConfig.model_validate(EvalConfig(preset="release").model_dump(mode="json"))
    assert again.agent.prompt_set == "release-v1"
    assert load_prompt_set("release-v1").checksum != PARAVT_V1_CHECKSUM


def test_crop_frames_rules_are_checksummed_checked_at_load_and_left_out_while_absent(tmp_path):
    """crop_frames_rules (how tool_mode=crop_frames answers calls) is part of release-v1's texts: a changed rule
    changes the checksum the report compares; a bad placeholder fails at load; a set without the block keeps
    its checksum (paravt-v1's is pinned above) and the defaults (paravt-v1's rules)."""
    import yaml

    from paravt_core.agent.prompts import CropFramesRules, load_prompt_set

    release = load_prompt_set("release-v1")
    assert release.rules.crop_failed.format(start=30, end=40.04) == "[Error cropping 30.0s-40.0s]"
    assert (release.rules.note_times, release.rules.extra_calls, release.rules.reader) == (
        "requested", "drop", "release")  # fmt: skip
    assert load_prompt_set("paravt-v1").rules == CropFramesRules()
    data = yaml.safe_load(release.model_dump_json())
    data["crop_frames_rules"]["extra_calls"] = "error"
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(data))
    assert load_prompt_set(str(changed)).checksum != release.checksum
    data["crop_frames_rules"]["crop_failed"] = "[Error cropping {begin}]"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=r"crop_frames_rules\.crop_failed: bad placeholder.*begin"):
        load_prompt_set(str(bad))


def test_release_v1_videomme_letters_options_twice_and_direct_asks_differently():
    from paravt_core.eval import benchmarks as B

    row = {"videoID": "fxA", "question_id": "001-1", "duration": "short", "question": "Which shape?",
           "options": ["A. A red circle.", "B. A blue square."], "answer": "A"}  # fmt: skip
    (s,) = B.to_samples("videomme", [row], _release_ctx())
    assert s.question_for("agentic") == (
        f"Question: Which shape?\nOptions:\nA. A. A red circle.\nB. B. A blue square.\n{LETTER_ONLY}"
    )
    assert s.question_for("reasoning") == s.question
    assert s.question_for("direct") == (
        f"Question: Which shape?\nOptions:\nA. A. A red circle.\nB. B. A blue square.\n{DIRECT_HINT}"
    )
    # paravt-v1 keeps its own layout and one question for every protocol
    (ours,) = B.to_samples("videomme", [row], B.Context(""))
    assert ours.question_for("direct") == ours.question and "A. A." not in ours.question


def test_release_v1_videomme_subtitles_line_by_line_and_left_out_when_missing(tmp_path):
    from paravt_core.eval import benchmarks as B

    subs = tmp_path / "subtitle"
    subs.mkdir()
    (subs / "fxA.srt").write_text(
        "1\n00:00:01,000 --> 00:00:02,000\n<i>Hello</i> there\nsecond line\n\n2\n00:00:03,000 --> 00:00:04,000\nBye\n"
    )
    rows = [{"videoID": v, "question_id": f"{v}-1", "duration": "short", "question": "Q?",
             "options": ["A. x", "B. y"], "answer": "B"} for v in ("fxA", "fxB")]  # fmt: skip
    a, b = B.to_samples("videomme_wsub", rows, _release_ctx(str(tmp_path)))
    body = f"Question: Q?\nOptions:\nA. A. x\nB. B. y\n{LETTER_ONLY}"
    assert a.question == f"This video's subtitles are listed below:\nHello there\nsecond line\nBye\n\n{body}"
    assert b.question == body  # fxB has no subtitle file: no block
    ours_a, ours_b = B.to_samples("videomme_wsub", rows, B.Context(str(tmp_path)))
    assert "Hello there second line\nBye\nQuestion:" in ours_a.question
    assert "(no subtitles available)" in ours_b.question


def test_release_v1_lvbench_mlvu_longvideobench_mmvu_layouts():
    from paravt_core.eval import benchmarks as B

    ctx = _release_ctx()
    lvb = {"uid": "9", "video_path": "v.mp4", "question": "What is last?\n(A) red\n(B) blue", "answer": "B",
           "question_type": ["entity recognition"]}  # fmt: skip
    (s,) = B.to_samples("lvbench", [lvb], ctx)
    assert s.question == f"What is last?\n(A) red\n(B) blue\n{LETTER_ONLY}"
    assert s.question_for("direct") == f"What is last?\n(A) red\n(B) blue\n{DIRECT_HINT}"
    mlvu = {"video_name": "m.mp4", "question": "Which color?\n(A) red\n(B) blue", "candidates": ["red", "blue"],
            "answer": "blue", "task_type": "plotQA", "question_id": "m1"}  # fmt: skip
    (s,) = B.to_samples("mlvu", [mlvu], ctx)
    assert (
        s.question == f"Question: Which color?\n(A) red\n(B) blue\nOptions:\nA. red\nB. blue\n{LETTER_ONLY}"
    )
    lvideo = {"id": "l1", "video_path": "l.mp4", "question": " Who waves? ", "option0": "a", "option1": "b",
              "option2": "N/A", "correct_choice": 1, "duration_group": 15}  # fmt: skip
    (s,) = B.to_samples("longvideobench", [lvideo], ctx)
    assert s.question == f"Question:  Who waves? \nOptions:\nA. a\nB. b\n{LETTER_ONLY}"  # not stripped
    oe = {"id": "o1", "video": "https://huggingface.co/datasets/yale-nlp/MMVU/resolve/main/videos/Art/0.mp4",
          "question": "Why does it glow?", "choices": {}, "answer": "heat", "question_type": "open-ended",
          "metadata": {"subject": "Art"}}  # fmt: skip
    (s,) = B.to_samples("mmvu", [oe], ctx)
    assert s.question == f"Question: Why does it glow?\nOptions:\n\n{LETTER_ONLY}"
    assert (s.qtype, s.forced, s.gold) == ("oe", "mcq", "heat")
    (ours,) = B.to_samples("mmvu", [oe], B.Context(""))
    assert (ours.question, ours.forced) == ("Question: Why does it glow?", "")


def test_release_v1_mmvu_open_ended_gets_the_letter_forced_answer():
    from paravt_core.eval import benchmarks as B
    from paravt_core.eval.protocols import agent_config

    oe = {"id": "o1", "video_path": "videos/Art/0.mp4", "question": "Why?", "choices": {}, "answer": "heat",
          "question_type": "open-ended"}  # fmt: skip
    base = preset_agent("release", AgentConfig(prompt_set="release-v1"))
    (rel,) = B.to_samples("mmvu", [oe], _release_ctx())
    (ours,) = B.to_samples("mmvu", [oe], B.Context(""))
    assert agent_config("agentic", B.get("mmvu"), rel, base, "release").forced_answer == "mcq"
    assert agent_config("agentic", B.get("mmvu"), ours, AgentConfig(), "paravt").forced_answer is None


# ---------------------------------------------------------------------------------------------------------
# Items 2 and 3: the release's error rule, the per-benchmark error limit, comparability. The release
# (utils.py run_dataset at cf55249): MCQ accuracy = sum(correct) / len(results with correct is not None), and a
# failed sample's base_result has correct=False -> errors are wrong answers. Charades: mIoU over results without
# an "error" key; an API failure inside the agent loop is the reply "[API error: ...]", scored (IoU 0).


def _ok(score, **meta):
    return {"status": "ok", "score": score, "meta": meta, "tool_calls": 0, "qtype": "mcq"}


def _error(reason, **meta):
    return {"status": "error", "score": None, "error": {"reason": reason}, "meta": meta}


def test_release_error_rule_scores_multiple_choice_errors_wrong():
    from paravt_core.eval.metrics import benchmark_metrics, headline

    recs = [_ok(1.0), _ok(1.0), _ok(1.0), _ok(0.0), _error("context_overflow")]
    ours, release = benchmark_metrics("videomme", recs), benchmark_metrics("videomme", recs, "release")
    assert (headline(ours), ours["denominator"]) == (75.0, 4)  # 3 of 4 scored
    assert (headline(release), release["denominator"]) == (60.0, 5)  # 3 of 5: the error is wrong
    mmvu = [_ok(1.0, kind="multiple-choice"), _ok(0.0, kind="multiple-choice"),
            _error("video_error", kind="multiple-choice"), _ok(0.5, kind="open-ended")]  # fmt: skip
    m = benchmark_metrics("mmvu", mmvu, "release")
    # the release's MMVU number: correct over every item, errors wrong (1.5 of 4); MC-only beside it (1 of 3)
    assert (m["headline"], headline(m)) == ("accuracy_errors_as_wrong", pytest.approx(37.5))
    assert m["mc_accuracy_errors_as_wrong"] == pytest.approx(100 / 3)
    assert headline(benchmark_metrics("mmvu", mmvu)) == 50.0


def test_release_error_rule_for_charades_scores_in_loop_failures_zero_and_leaves_out_the_rest():
    from paravt_core.eval.metrics import benchmark_metrics, headline

    recs = [_ok(0.2), _ok(0.5), _ok(0.8), _error("engine_timeout"), _error("video_error")]
    assert headline(benchmark_metrics("charades", recs)) == pytest.approx(50.0)  # 1.5 / 3
    m = benchmark_metrics("charades", recs, "release")
    assert (headline(m), m["denominator"]) == (pytest.approx(37.5), 4)  # 1.5 / 4: the video error stays out


def test_error_rule_follows_the_preset_unless_set():
    from paravt_core.eval.config import EvalConfig

    assert EvalConfig(preset="release").resolved_error_rule == "release"
    assert EvalConfig().resolved_error_rule == "paravt"
    assert EvalConfig(preset="release", error_rule="paravt").resolved_error_rule == "paravt"


def test_the_error_limit_is_per_benchmark_not_pooled():
    from paravt_core.eval.metrics import benchmark_metrics
    from paravt_core.eval.stage import error_gate

    # 3 errors in 10 videomme_wsub samples, none in 100 lvbench: pooled 3 / 110 = 2.7% < 5%, but 30% > 5%
    per = {"agentic": {"videomme_wsub": benchmark_metrics("videomme_wsub", [_ok(1.0)] * 7 + [_error("x")] * 3),
                       "lvbench": benchmark_metrics("lvbench", [_ok(1.0)] * 100)}}  # fmt: skip
    gate = error_gate(per, 0.05)
    assert gate["passed"] is False and gate["failing"] == {"agentic.videomme_wsub": pytest.approx(0.3)}
    assert error_gate(per, 0.3)["passed"] is True


# The config of a run that is the release's in everything comparability() checks (engine a server, the whole
# registry split, the question suffix, the release's frame path).
RELEASE_RUN_CONFIG = {"engine": {"kind": "openai"}, "benchmarks": [{"name": "videomme"}], "demo_data": "",
                      "agent": {"question_suffix": True, "frame_path": "qwen-vl-utils"}}  # fmt: skip


def _report_results(preset="release", checksum=None, rule="release", reader=None, config=None):
    from paravt_core.eval import report
    from paravt_core.eval.metrics import benchmark_metrics

    reader = reader or ("release" if rule == "release" else "robust")
    recs = {"videomme": [_ok(1.0), _ok(0.0), _error("engine_error")], "charades": [_ok(0.5)]}
    return {"preset": preset, "error_rule": rule, "reader": reader, "prompt_protocol": "x",
            "prompt_checksum": checksum or report.release_checksum(), "config": config or RELEASE_RUN_CONFIG,
            "protocols": {"agentic": {b: benchmark_metrics(b, r, rule, reader) for b, r in recs.items()}}}  # fmt: skip


def test_comparability_requires_preset_prompts_and_error_rule_and_names_each_failure():
    from paravt_core.agent.prompts import load_prompt_set
    from paravt_core.eval.report import comparability

    assert comparability(_report_results(), "videomme") == ""
    ours = load_prompt_set("paravt-v1").checksum
    why = comparability(_report_results(checksum=ours), "videomme")
    assert why.startswith("not comparable: prompts x (c91d7f015b4c) are not the release's release-v1")
    why = comparability(_report_results(rule="paravt", reader="release"), "videomme")
    assert why == ("not comparable: error_rule=paravt: errors left out of the denominator (the release scores "
                   "them wrong)")  # fmt: skip
    why = comparability(_report_results(preset="paravt", checksum=ours, rule="paravt"), "videomme")
    assert why.count("; ") == 3 and "preset=paravt" in why and "prompts" in why and "error_rule" in why
    assert "reader=robust" in why
    # Charades: the release's input was the whole video as video_url; labelled frames stand in -> no delta
    assert "video_url" in comparability(_report_results(), "charades")
    # sent as the release sends it (an engine whose server decodes the video: vLLM) -> comparable
    sent = {**_report_results(), "overview_channels": {"charades": "video_url", "videomme": "frames"}}
    assert comparability(sent, "charades") == ""


def test_the_release_servers_sampling_defaults_are_sent_or_named(tmp_path):
    """The release's server filled every field its requests left out from the checkpoint's
    generation_config.json; under greedy decoding only the penalties change a reply: preset=release sends them
    on a chat server and names them as a difference where the engine cannot."""
    from paravt_core.config import load_config
    from paravt_core.eval.config import EvalConfig
    from paravt_core.eval.protocols import release_penalties
    from paravt_core.eval.report import comparability
    from paravt_core.eval.stage import sampling_report

    checkpoint = {
        "repetition_penalty": 1.05,
        "presence_penalty": 0.0,
        "top_k": 20,
        "top_p": 0.8,
        "temperature": 0.7,
    }
    assert release_penalties(checkpoint) == {"repetition_penalty": 1.05}  # the rest neutral or not a penalty
    assert release_penalties({"repetition_penalty": 1.0, "frequency_penalty": 0}) == {}
    (tmp_path / "generation_config.json").write_text(json.dumps(checkpoint))
    (tmp_path / "config.json").write_text("{}")  # a checkpoint directory
    base = [f"model={tmp_path}", "preset=release"]
    on_server = sampling_report(
        load_config(EvalConfig, None, [*base, "engine.kind=vllm", "engine.base_url=http://h:1"])
    )
    in_process = sampling_report(load_config(EvalConfig, None, base))  # engine.kind=transformers
    assert (on_server["penalties"], on_server["sent"]) == ({"repetition_penalty": 1.05}, True)
    assert (in_process["penalties"], in_process["sent"]) == ({"repetition_penalty": 1.05}, False)
    assert sampling_report(load_config(EvalConfig, None, [f"model={tmp_path}"])) is None  # preset=paravt
    assert comparability({**_report_results(), "sampling": on_server}, "videomme") == ""
    why = comparability({**_report_results(), "sampling": in_process}, "videomme")
    assert "{'repetition_penalty': 1.05}, which the release's server applied" in why
    unknown = sampling_report(load_config(EvalConfig, None, [f"model={tmp_path / 'gone'}", "preset=release"]))
    assert unknown["penalties"] is None and "gone" in unknown["source"]
    assert "the sampling defaults the release's server applied are unknown: " in comparability(
        {**_report_results(), "sampling": unknown}, "videomme"
    )


def test_the_report_cell_shows_both_denominators():
    from paravt_core.eval import report

    html = report.render_html({**_report_results(), "model": "m", "published_model": "ParaVT-8B",
                               "totals": {"samples": 4, "scored": 3, "errors": 1, "error_share": 0.25},
                               "errors_by_reason": {}, "gate": {"passed": True}}, {})  # fmt: skip
    # videomme: 1 of 2 scored = 50.0 left out; 1 of 3 = 33.3 as the release scores it (the headline)
    assert "errors left out: 50.0 · errors wrong (release rule): 33.3" in html
    assert "<b>33.3</b>" in html and "-28.8" in html  # 33.3 - 62.1 published, comparable


# ---------------------------------------------------------------------------------------------------------
# The stage under preset=release on fixture rows in the benchmarks' real schemas, with the tiny model's
# processor (the main agent's replies scripted: the random tiny model would write 2048 tokens per turn on
# 64 frames). The report says "comparable" only where preset, prompts and error rule are the release's.


def _release_run(tmp_path, tiny_model, eval_fixtures, **overrides):
    import json
    from pathlib import Path

    from paravt_core.eval.stage import run
    from tests.support.eval_support import KeyedEngine, fixture_entry, tiny_eval_config

    benches = [fixture_entry(eval_fixtures, n) for n in ("videomme", "lvbench", "charades")]
    script = {"a red circle appears": ["The event happens in the 1.0 - 3.0 seconds."]}
    engine = KeyedEngine(tiny_model.processor, script, default="<answer>B</answer>")
    cfg = tiny_eval_config(tmp_path, "tiny", benches, preset="release", published_model="ParaVT-8B",
                           runner={"concurrency": 2, "retries": 0, "backoff_s": 0.0}, **overrides)  # fmt: skip
    run(cfg, engine=engine, processor=tiny_model.processor)
    out = Path(cfg.output)
    return json.loads((out / "results.json").read_text()), (out / "report.html").read_text(), out


def test_stage_under_preset_release_is_comparable_only_where_everything_is_the_releases(
    tiny_model, eval_fixtures, tmp_path
):
    import json

    from paravt_core.eval import report

    results, html, out = _release_run(tmp_path, tiny_model, eval_fixtures)
    assert (results["prompt_protocol"], results["error_rule"]) == ("release-v1", "release")
    assert results["prompt_checksum"] == report.release_checksum()
    first = json.loads((out / "samples/agentic/videomme.jsonl").read_text().splitlines()[0])
    assert "\nOptions:\nA. A. " in first["question"] and first["question"].endswith(LETTER_ONLY)
    table = html.split("<h2>Headline")[1].split("</table>")[0]
    rows = {r.split("<th>")[1].split(" <small>")[0]: r for r in table.split("<tr>")[2:]}
    # a tiny in-process run on fixture rows: every condition the release's run differs in is named
    for name in ("videomme", "lvbench", "charades"):
        assert report.COMPARABLE not in rows[name]
        assert "engine.kind=transformers, not a server" in rows[name]
        assert "rows overridden (source=" in rows[name] and "frames: ours" not in rows[name]
        assert "preset=" not in rows[name] and "prompts" not in rows[name] and "reader=" not in rows[name]
    assert "video_url" in rows["charades"]


def test_stage_under_preset_release_with_our_prompts_names_the_prompts(tiny_model, eval_fixtures, tmp_path):
    agent = {
        **__import__("tests.support.eval_support", fromlist=["TINY_AGENT"]).TINY_AGENT,
        "prompt_set": "paravt-v1",
    }
    results, html, _ = _release_run(tmp_path, tiny_model, eval_fixtures, agent=agent)
    assert results["prompt_protocol"] == "paravt-v1"
    from paravt_core.eval import report

    assert report.COMPARABLE not in html
    assert "not comparable: prompts paravt-v1 (c91d7f015b4c) are not the release&#x27;s release-v1" in html


# ---------------------------------------------------------------------------------------------------------
# Item 5: MMVU. lmms-eval 0.7.3 tasks/mmvu/utils.py mmvu_aggregate_results_val: 100 * correct / answered over
# every item (multiple choice and open-ended alike).


def test_mmvu_shows_lmms_evals_all_items_number_beside_ours_labelled():
    from paravt_core.eval import report
    from paravt_core.eval.metrics import benchmark_metrics

    recs = [
        {**_ok(1.0, kind="multiple-choice"), "qtype": "mcq"},
        {**_ok(1.0, kind="multiple-choice"), "qtype": "mcq"},
        {**_ok(0.0, kind="multiple-choice"), "qtype": "mcq"},
        {**_ok(1.0, kind="open-ended"), "qtype": "oe", "score_source": "judge"},
        {**_ok(0.0, kind="open-ended"), "qtype": "oe", "score_source": "judge"},
    ]
    m = benchmark_metrics("mmvu", recs)
    # ours: 2 of 3 multiple choice = 66.7; lmms-eval's: 3 right of all 5 items = 60.0
    assert (m["headline"], m["mc_accuracy"], m["all_items_accuracy"]) == (
        "mc_accuracy",
        pytest.approx(200 / 3),
        60.0,
    )
    html = report.render_html({"preset": "paravt", "protocols": {"agentic": {"mmvu": m}}, "model": "x",
                               "totals": {"samples": 5, "scored": 5, "errors": 0, "error_share": 0.0},
                               "errors_by_reason": {}, "gate": {"passed": True}}, {})  # fmt: skip
    assert "lmms-eval mmvu_val (all items, multiple choice + open-ended): 60.0" in html
    assert (
        report.kfp_metrics(
            {
                "protocols": {"agentic": {"mmvu": m}},
                "totals": {"samples": 5, "scored": 5, "errors": 0, "error_share": 0.0},
            }
        )["agentic.mmvu.all_items_accuracy"]
        == 60.0
    )


# ---------------------------------------------------------------------------------------------------------
# Item 7: LVBench options lists, Charades gold as numbers, the LongVideoBench note, aligned subtitles.


def test_lvbench_rows_with_an_options_list_are_lettered_as_lmms_eval_does():
    from paravt_core.eval import benchmarks as B

    # lmms-eval 0.7.3 tasks/lvbench/utils.py lvbench_doc_to_text: question + "\n" + "(A) opt" lines
    row = {"uid": "7", "video_path": "v.mp4", "question": "What happens last?", "options": ["red", "blue"],
           "answer": "B", "question_type": ["key information retrieval"]}  # fmt: skip
    (s,) = B.to_samples("lvbench", [row], B.Context(""))
    assert s.error is None and (s.gold, s.letters) == ("B", "AB")
    assert s.question.startswith("Question: What happens last?\n(A) red\n(B) blue\n")


def test_charades_gold_is_scored_as_numbers_not_reparsed_text():
    import asyncio

    from paravt_core.eval import benchmarks as B
    from paravt_core.eval.scoring import score_sample

    row = {
        "video": "AO8RW.mp4",
        "caption": "a person is putting a book on a shelf",
        "timestamp": [5e-05, 6.2],
    }
    (s,) = B.to_samples("charades", [row], B.Context(""))
    assert s.gold_interval == (5e-05, 6.2)
    score = asyncio.run(score_sample(s, "The event happens in the 0.0 - 6.2 seconds."))
    # IoU of [0, 6.2] with [0.00005, 6.2] = 6.19995 / 6.2 (the text "5e-05, 6.2" would read as 5 - 6.2)
    assert score.score == pytest.approx(6.19995 / 6.2) and score.parsed == [0.0, 6.2]


def test_longvideobench_note_says_what_the_release_does_with_an_unreadable_answer():
    from paravt_core.eval.metrics import benchmark_metrics

    m = benchmark_metrics("longvideobench", [{**_ok(0.0), "score_reason": "unparseable_letter"}])
    assert "as the release does" not in m["notes"][0]
    assert "the release reads the reply's first character" in m["notes"][0]


def test_aligned_subtitles_keep_the_cues_covering_the_sampled_frames():
    from paravt_core.eval.formats import aligned_subtitles

    # 100 frames at 10 fps, 4 sampled: linspace(0, 99, 4) -> 0, 33, 66, 99 (int). Cue frames: [0, 20) holds 0;
    # [21, 30) none; [30, 40) holds 33; [95, 100) holds 99.
    cues = [(0.0, 2.0, "one"), (2.1, 3.0, "two"), (3.0, 4.0, "three"), (9.5, 10.0, "four")]
    assert aligned_subtitles(cues, 10.0, 100, 4) == "one\nthree\nfour"


def test_videomme_wsub_aligned_on_a_real_video_and_labelled_in_the_report(tmp_path):
    from paravt_core.eval import benchmarks as B
    from paravt_core.eval import report
    from paravt_core.eval.metrics import benchmark_metrics
    from tests.support.eval_support import SUBTITLED_ROW, write_subtitled_video

    write_subtitled_video(tmp_path)
    # 40 frames at 4 fps; 4 sampled: 0, 13, 26, 39. Cues in frames: [0, 4) 0; [8, 12) none; [12, 16) 13;
    # [36, 40) 39.
    row = dict(SUBTITLED_ROW)
    (s,) = B.to_samples("videomme_wsub", [row], B.Context(str(tmp_path), subtitle_frames=4))
    assert s.question.startswith("This video's subtitles are listed below:\nHi\nmiddle\nend\nQuestion: Q?")
    (full,) = B.to_samples("videomme_wsub", [row], B.Context(str(tmp_path)))
    assert "Hi\nskipped\nmiddle\nend\n" in full.question
    m = {**benchmark_metrics("videomme_wsub", [_ok(1.0)], "release"), "subtitles": "aligned"}
    results = {"preset": "release", "error_rule": "release", "prompt_protocol": "release-v1",
               "prompt_checksum": report.release_checksum(), "protocols": {"agentic": {"videomme_wsub": m}}}  # fmt: skip
    assert "subtitles aligned to the sampled frames" in report.comparability(results, "videomme_wsub")
    html = report.render_html({**results, "model": "x", "published_model": "ParaVT-8B", "errors_by_reason": {},
                               "totals": {"samples": 1, "scored": 1, "errors": 0, "error_share": 0.0},
                               "gate": {"passed": True}}, {})  # fmt: skip
    assert report.SUBTITLES["aligned"] in html


def test_charades_goes_as_a_video_url_only_under_the_release_on_a_server_that_decodes_it(
    tiny_model, tmp_path
):
    """preset=release on vLLM: the whole Charades video as one ``file://`` part, no frames decoded here, the
    request marked as carrying the server's own media (its prompt ids are not compared with ours); a missing
    video is a ``video_error``. Elsewhere (another preset, an engine that cannot decode it) frames stand in."""
    import asyncio

    from paravt_core.agent.episode import arun_episode
    from paravt_core.engines.scripted import ScriptedEngine
    from paravt_core.eval import benchmarks as B
    from paravt_core.eval.protocols import agent_config, overview_channel

    charades, videomme = B.get("charades"), B.get("videomme")
    assert overview_channel(charades, "release", video_urls=True) == "video_url"
    assert overview_channel(charades, "release", video_urls=False) == "frames"
    assert overview_channel(charades, "paravt", video_urls=True) == "frames"
    assert overview_channel(videomme, "release", video_urls=True) == "frames"

    row = {"video": "v.mp4", "caption": "a red circle appears", "timestamp": [1.0, 8.0]}
    (sample,) = B.to_samples("charades", [row], _release_ctx())
    base = preset_agent("release", AgentConfig(prompt_set="release-v1", max_turns=0))
    cfg = agent_config("direct", charades, sample, base, "release", video_urls=True)
    assert cfg.overview_channel == "video_url"
    video = tmp_path / "v.mp4"
    write_video(video, [Event("circle", "red", 1.0, 3.0, (10, 10, 120, 100))], 4.0, 10.0, (128, 96))
    engine = ScriptedEngine(tiny_model.processor, ["The event happens in 1.0 - 3.0 seconds."])
    result = asyncio.run(arun_episode({"video": str(video), "question": sample.question}, engine, cfg))
    assert result.finish_reason in ("answer", "no_answer"), result.error
    (request,) = engine.requests
    user = next(m for m in request.messages if m["role"] == "user")["content"]
    assert user[0] == {"type": "video_url", "video_url": {"url": f"file://{video.resolve()}"}}
    assert [p["type"] for p in user] == ["video_url", "text"] and not request.images and request.server_media
    assert result.nframes == 0
    missing = asyncio.run(arun_episode({"video": str(tmp_path / "gone.mp4"), "question": "q"}, engine, cfg))
    assert missing.finish_reason == "video_error" and "gone.mp4" in missing.error


# Under ``preset=release`` the files are read and the server's limits applied as the release
# did (EvolvingLMMs-Lab/ParaVT at cf55249, ``paravt/eval/utils.py`` and ``driver.py``), the default preset
# unchanged. Expected values are worked out by hand from the release's lines cited in each test.
#
# - Video-MME copies named ``.MP4``/``.mkv``: the release's loader names every video ``<videoID>.mp4`` (utils.py
#   lines 246 and 282) and ``eval_one`` answers a missing path with the error "video not found" (driver.py lines
#   439-440), which its ``run_dataset`` counts wrong (utils.py lines 706-711: ``correct`` False stays in);
# - SRT files: ``parse_srt`` (utils.py lines 178-195): UTF-8 with ``errors="ignore"``, blocks split at blank
#   lines, every line after the second of a block of three or more lines;
# - LVBench rows that list their options apart: the loader writes ``f"{item['question']}\n{mcq_instr}"`` (utils.py
#   line 329), the options list never read;
# - the server: vLLM 0.17.1 started with ``--max-model-len 65536`` and ``--limit-mm-per-prompt
#   '{"video":1,"image":1024}'`` (utils.py lines 517-524).
RELEASE_TEXTS = load_prompt_set("release-v1").benchmark


HINT = "Answer with the option letter only."  # utils.py load_samples mcq_instr


def _release(root: str = "", subtitles: str = "") -> B.Context:
    return B.Context(root, subtitles, texts=RELEASE_TEXTS, preset="release")


def _videomme_row(video_id: str, qid: str) -> dict[str, Any]:
    return {"videoID": video_id, "question_id": qid, "duration": "short", "question": "Which shape?",
            "options": ["A. red", "B. blue"], "answer": "A"}  # fmt: skip


def test_videomme_copy_not_named_mp4_is_the_release_error_and_scored_wrong(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("up.MP4", "mk.mkv", "ok.mp4"):
        (data / name).write_bytes(b"")
    rows = [_videomme_row("up", "1"), _videomme_row("mk", "2"), _videomme_row("ok", "3")]
    up, mk, ok = B.to_samples("videomme", rows, _release(str(tmp_path)))
    # the release's path, <videoID>.mp4, which does not exist; the error says why and what preset=paravt runs
    assert up.video == str(data / "up.mp4") and mk.video == str(data / "mk.mp4")
    assert up.error_reason == mk.error_reason == "video_not_found"
    assert up.error.startswith(f"video not found: {data / 'up.mp4'} ") and "up.MP4" in up.error
    assert "mk.mkv" in mk.error and "<videoID>.mp4" in mk.error
    assert ok.error is None and ok.video == str(data / "ok.mp4")
    # the default preset runs both copies, as before
    d_up, d_mk, _ = B.to_samples("videomme", rows, B.Context(str(tmp_path), texts=RELEASE_TEXTS))
    assert (d_up.video, d_up.error) == (str(data / "up.MP4"), None)
    assert (d_mk.video, d_mk.error) == (str(data / "mk.mkv"), None)

    # recorded as an error (never run: no engine is needed), counted wrong under the release's error rule
    bench = B.get("videomme")
    base = protocols.preset_agent("release", EvalConfig(preset="release").agent)
    records = [
        asyncio.run(run_one(s, "agentic", bench, None, base, RunOptions(), preset="release"))
        for s in (up, mk)
    ]
    assert [(r["status"], r["error"]["reason"]) for r in records] == [("error", "video_not_found")] * 2
    right = {"id": "3", "status": "ok", "score": 1.0, "release_score": 1.0, "qtype": "mcq", "gold": "A"}
    m = benchmark_metrics("videomme", [*records, right], "release", "release")
    assert m["headline"] == "accuracy_errors_as_wrong" and m["accuracy_errors_as_wrong"] == pytest.approx(
        100 / 3
    )


def test_videomme_wsub_copy_not_named_mp4_is_the_error_before_its_subtitles_are_read(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "v.mkv").write_bytes(b"")
    (tmp_path / "subtitle").mkdir()
    (tmp_path / "subtitle" / "v.srt").write_text("1\n00:00:01,000 --> 00:00:02,000\nhello\n")
    (s,) = B.to_samples("videomme_wsub", [_videomme_row("v", "1")], _release(str(tmp_path)))
    assert s.error_reason == "video_not_found" and "v.mkv" in s.error


# One file with every case where the release's positional reader and our cue parser differ. By hand, after
# utils.py lines 183-193: invalid bytes \xff\xfe dropped ("Caf sign"); a block without its index line loses
# its first text line ("no index first line"); a cue of two lines gives two lines (tags removed); a broken time
# line is not noticed ("broken time" kept); a block of two lines (no text) gives nothing. CRLF ends are "\n".
ODD_SRT = (
    b"1\r\n00:00:01,000 --> 00:00:02,000\r\nCaf\xff\xfe sign\r\n\r\n"
    b"00:00:03,000 --> 00:00:04,000\nno index first line\nsecond line\n\n"
    b"3\n00:00:05,000 --> 00:00:06,000\n<b>multi</b>\nline cue\n\n"
    b"4\n00:00:07,000 --> 00:00:0x,000\nbroken time\n \n"
    b"5\n00:00:09,000 --> 00:00:10,000\n"
)


RELEASE_LINES = "Caf sign\nsecond line\nmulti\nline cue\nbroken time"


# ours (formats.parse_srt, cue by cue from the time line; release-v1's one line per line): invalid bytes become
# U+FFFD, the cue without index keeps both lines, the cue with a broken time is dropped
OUR_LINES = "Caf\ufffd\ufffd sign\nno index first line\nsecond line\nmulti\nline cue"


def test_release_srt_reader_is_positional_and_drops_undecodable_bytes():
    assert release_srt_lines(ODD_SRT) == RELEASE_LINES
    assert release_srt_lines(b"") == ""
    assert release_srt_lines(b"1\n00:00:01,000 --> 00:00:02,000\n") == ""  # two lines: no text


def test_videomme_wsub_question_carries_the_release_subtitle_lines_under_release_only(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "v.mp4").write_bytes(b"")
    (tmp_path / "subtitle").mkdir()
    (tmp_path / "subtitle" / "v.srt").write_bytes(ODD_SRT)
    row = _videomme_row("v", "1")
    (rel,) = B.to_samples("videomme_wsub", [row], _release(str(tmp_path)))
    # utils.py line 273 and 278: header, the lines, a blank line, then the question
    question = "Question: Which shape?\nOptions:\nA. A. red\nB. B. blue\n" + HINT
    assert rel.question == f"This video's subtitles are listed below:\n{RELEASE_LINES}\n\n{question}"
    (ours,) = B.to_samples("videomme_wsub", [row], B.Context(str(tmp_path), texts=RELEASE_TEXTS))
    assert ours.question == f"This video's subtitles are listed below:\n{OUR_LINES}\n\n{question}"


LISTED = {"uid": "u1", "video_path": "v.mp4", "question": "What is shown?", "options": ["a cat", "a dog"],
          "answer": "B", "question_type": ["entity recognition"]}  # fmt: skip


def test_lvbench_options_list_is_not_shown_under_release():
    (rel,) = B.to_samples("lvbench", [LISTED], _release("/m"))
    assert rel.question == f"What is shown?\n{HINT}"  # utils.py line 329: the question field as it is
    assert (rel.gold, rel.letters) == ("B", "AB")  # the options still give the gold and the letter range
    (ours,) = B.to_samples("lvbench", [LISTED], B.Context("/m", texts=RELEASE_TEXTS))
    assert ours.question == f"What is shown?\n(A) a cat\n(B) a dog\n{HINT}"  # lmms-eval's layout, ours


def test_stage_reads_rows_with_the_preset(tmp_path):
    """``paravt eval`` hands the preset to the converters (the LVBench case above, through the stage)."""
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps(LISTED) + "\n")
    b = EvalBenchmarkConfig(name="lvbench", source=str(src), media_root=str(tmp_path))
    (rel,) = load_samples(b, str(tmp_path / "w"), "release-v1", 64, "release")
    (ours,) = load_samples(b, str(tmp_path / "w"), "release-v1", 64)
    assert rel.question == f"What is shown?\n{HINT}"
    assert ours.question == f"What is shown?\n(A) a cat\n(B) a dog\n{HINT}"


class _Models(BaseHTTPRequestHandler):
    """``GET /v1/models`` as vLLM 0.17.1 answers it (``entrypoints/openai/models/serving.py``
    ``show_available_models``: one ``ModelCard`` per served model with ``max_model_len``)."""

    cards: list[dict[str, Any]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": self.cards}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def models_server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _results(server: dict[str, Any] | None) -> dict[str, Any]:
    cfg = EvalConfig(preset="release", engine={"kind": "openai", "base_url": "http://x/v1"})
    return build_results(cfg, {"agentic": {"videomme": []}}, 0.0, server)


def test_server_context_is_recorded_and_a_smaller_one_makes_the_row_not_comparable(
    models_server, monkeypatch
):
    monkeypatch.setattr(_Models, "cards", [{"id": "other", "max_model_len": 4096},
                                           {"id": "ParaVT/ParaVT-8B", "object": "model", "max_model_len": 32768}])  # fmt: skip
    cfg = EvalConfig(preset="release", model="ParaVT/ParaVT-8B",
                     engine={"kind": "openai", "base_url": models_server})  # fmt: skip
    server = server_report(cfg)
    assert server == {"max_model_len": 32768, "source": "GET /models"}  # the served model's card
    results = _results(server)
    assert results["server"] == server
    why = report.comparability(results, "videomme")
    assert "the server's context is 32768 tokens, under the release's --max-model-len 65536" in why
    assert "server context</th><td>32768 tokens (the release's vLLM: 65536)" in report.render_html(
        results, {}
    )
    # the release's own context, or a larger one (the episode still stops at 65,536): not named
    for ok in (65536, 131072, None):
        assert "server's context" not in report.comparability(_results({"max_model_len": ok}), "videomme")


def test_server_that_reports_no_context_or_cannot_be_asked(models_server, monkeypatch):
    monkeypatch.setattr(_Models, "cards", [{"id": "m", "object": "model"}])  # SGLang <0.4 / other servers
    assert served_context(models_server, "m")["max_model_len"] is None
    gone = served_context("http://127.0.0.1:9/v1", "m", timeout_s=2)  # nothing listens on the discard port
    assert gone["max_model_len"] is None and gone["source"].startswith("GET /models failed")
    assert server_report(EvalConfig(preset="release")) is None  # in-process engine: no server to ask


def test_release_episode_never_reaches_the_server_image_limit_and_fills_its_context_as_vllm():
    """vLLM 0.17.1 refuses a prompt with more than ``--limit-mm-per-prompt`` images
    (``vllm/multimodal/processing/context.py`` ``validate_num_items``): 1024 in the release. A release episode
    sends at most 64 overview + 3 rounds x 5 calls x 16 crop frames = 304. Its context is the release's 65,536
    whatever the base config says."""
    agent = protocols.preset_agent(
        "release", AgentConfig(max_turns=9, max_parallel=9, max_context_tokens=4096)
    )
    assert protocols.max_images(agent) == 64 + 3 * 5 * 16 == 304 <= protocols.RELEASE_IMAGE_LIMIT == 1024
    assert agent.max_context_tokens == protocols.RELEASE_MAX_MODEL_LEN == 65_536


def test_a_release_preset_over_the_image_limit_is_refused(monkeypatch):
    monkeypatch.setitem(protocols.RELEASE_AGENT, "overview_frames", 1024)
    with pytest.raises(ValueError, match="over the release server's --limit-mm-per-prompt of 1024"):
        protocols.preset_agent("release", AgentConfig())


def test_charades_engine_failure_without_the_tool_is_left_out_as_the_release_does():
    """A request the server refuses (context_overflow) or that fails: inside the release's agent loop the reply
    is "[API error: ...]", read as no interval (IoU 0; driver.py lines 466-476); under direct/reasoning the
    sample is an error result (driver.py lines 453-460) that Charades leaves out (utils.py line 729)."""
    ok = {"id": "a", "status": "ok", "score": 0.6, "release_score": 0.6, "qtype": "tvg"}
    overflow = {"id": "b", "status": "error", "score": None, "error": {"reason": "context_overflow"}}
    agentic = benchmark_metrics("charades", [ok, overflow], "release", "release", "agentic")
    direct = benchmark_metrics("charades", [ok, overflow], "release", "release", "direct")
    assert agentic["miou_errors_as_zero"] == pytest.approx(30.0) and agentic["denominator"] == 2
    assert direct["miou_errors_as_zero"] == pytest.approx(60.0) and direct["denominator"] == 1


def test_release_request_asks_for_the_room_left_and_a_full_context_ends_the_sample(tiny_model, tmp_path):
    """vLLM 0.17.1 lowers ``max_tokens`` to ``max_model_len - prompt`` (``entrypoints/utils.py``
    ``get_max_tokens``) and refuses only a prompt of ``max_model_len`` tokens or more
    (``v1/engine/input_processor.py`` ``_validate_prompt_len``): the release episode does the same with the
    release's 65,536 (frames included: 64 unlabelled overview frames of the synthetic video). A refused
    request is an error the release scores wrong (``context_overflow``, in ``IN_LOOP_ERRORS``)."""
    from paravt_core.engines.scripted import ScriptedEngine
    from paravt_core.synth import Event, write_video

    video = tmp_path / "v.mp4"
    write_video(video, [Event("circle", "red", 1.0, 8.0, (10, 10, 120, 100))], 12.0, 30.0, (426, 240))
    base = protocols.preset_agent("release", EvalConfig(preset="release").agent)
    bench = B.get("videomme")

    def run(question: str) -> tuple[dict[str, Any], ScriptedEngine]:
        sample = B.Sample("videomme", "1", str(video), question, "A", letters="AB")
        engine = ScriptedEngine(tiny_model.processor, ["<answer>A</answer>"])
        record = asyncio.run(run_one(sample, "direct", bench, engine, base, RunOptions(retries=0),
                                     processor=tiny_model.processor, preset="release"))  # fmt: skip
        return record, engine

    short, engine = run("Which shape?")
    (request,) = engine.requests
    assert short["status"] == "ok" and short["frames"] == 64 and request.sampling.max_new_tokens == 2048
    per = len(tiny_model.processor.tokenizer(" hello" * 1000)["input_ids"]) // 1000  # tokens per " hello"
    p0 = len(request.input_ids)
    near, engine = run("Which shape?" + " hello" * ((65_536 - 100 - p0) // per))
    (request,) = engine.requests
    assert near["status"] == "ok" and 65_536 - 2048 < len(request.input_ids) < 65_536
    assert request.sampling.max_new_tokens == 65_536 - len(request.input_ids)  # under the 2048 asked for
    full, engine = run("Which shape?" + " hello" * ((65_536 - p0) // per + 1))
    assert engine.requests == []  # never sent: the release's server answers such a request with 400
    assert (full["status"], full["error"]["reason"]) == ("error", "context_overflow")
