"""Issue 41 item 3: the code issues 38 and 40 added (readers, comparability, the media path; rescore and the
release frames in their own files), pinned down where its first mutation run found behaviours no
test checked (docs/mutation.md, "Code added by issues 38 and 40"). Every expected value is worked out by hand:
the reader cases from the release (EvolvingLMMs-Lab/ParaVT at cf55249) ``paravt/eval/utils.py``
``extract_letter`` (lines 110-129), ``extract_time_from_response`` (132-169), ``temporal_iou`` (172-175) and
``paravt/eval/driver.py`` ``_score`` (307-317); the comparability lines from ``eval/report.py``'s own texts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from paravt_core.eval import report
from paravt_core.eval.readers import release_interval, release_iou, release_letter, release_score
from paravt_core.eval.report import comparability
from paravt_core.train import media

# ---------------------------------------------------------------------------------------------------------
# eval/report.py: comparability and _config_differences, whole lines.

PRESET = "preset=paravt, not release (the published numbers come from the release's driver)"
RULE = "error_rule=paravt: errors left out of the denominator (the release scores them wrong)"
READER = "reader=robust: answers read by ours, not the release's extract_letter"
ENGINE = "engine.kind=transformers, not a server (the release queries a vLLM server)"
SUFFIX = "agent.question_suffix=false (the release appends the video path to every agentic question)"
DEMO = "rows from demo_data fixtures, not the benchmark"
MMVU_F1 = "MMVU open-ended items scored by token F1, not the judge or the release's reader"
CHARADES = "the release feeds Charades as video_url (vLLM decodes the whole video server-side); ours sends 64 labelled frames"  # fmt: skip
ALIGNED = "subtitles aligned to the sampled frames (lmms-eval's), not every cue as the release gave them"


def _release(**over):
    """Results the release's in everything comparability checks (no config: the config checks are skipped)."""
    return {"preset": "release", "error_rule": "release", "reader": "release",
            "prompt_checksum": report.release_checksum(), "protocols": {}, **over}  # fmt: skip


def test_comparability_defaults_of_an_old_results_file_name_ours_in_order():
    # a results.json written before these keys existed: preset paravt, no checksum (prompts None, digest ""),
    # error rule paravt, reader robust; joined by "; " after one "not comparable: "
    assert comparability({"protocols": {}}, "videomme") == (
        f"not comparable: {PRESET}; prompts None () are not the release's release-v1; {RULE}; {READER}"
    )


def test_comparability_charades_subtitles_and_mmvu_lines_are_whole():
    assert comparability(_release(), "videomme") == ""
    assert comparability(_release(), "charades") == f"not comparable: {CHARADES}"
    aligned = _release(protocols={"agentic": {"videomme_wsub": {"subtitles": "aligned"}}})
    assert comparability(aligned, "videomme_wsub") == f"not comparable: {ALIGNED}"
    f1 = {"oe_scored_by": ["f1"], "oe_comparable": False}
    # named once even when two protocols scored MMVU's open-ended items by token F1
    two = _release(protocols={"direct": {"mmvu": f1}, "agentic": {"mmvu": dict(f1)}})
    assert comparability(two, "mmvu") == f"not comparable: {MMVU_F1}"
    # the judge (comparable) or no open-ended item scored: nothing to name; the MMVU rule is MMVU's only
    assert (
        comparability(_release(protocols={"agentic": {"mmvu": {**f1, "oe_comparable": True}}}), "mmvu") == ""
    )
    assert comparability(_release(protocols={"agentic": {"mmvu": {"oe_comparable": False}}}), "mmvu") == ""
    assert comparability(_release(protocols={"agentic": {"videomme": f1}}), "videomme") == ""


def test_config_differences_lines_are_whole_and_read_only_this_benchmarks_rows():
    config = {
        # no engine section: transformers, the default engine
        "benchmarks": [{"name": "mlvu"}, {"name": "videomme", "limit": 5, "split": "dev"}],
        "demo_data": "/fixtures",
        "agent": {"question_suffix": False, "frame_path": "qwen-vl-utils"},
    }
    rows = "rows overridden (limit=5, split=dev): the release runs the registry's whole split"
    assert report._config_differences(config, "videomme", "ParaVT-8B") == [ENGINE, rows, DEMO, SUFFIX]
    assert (
        comparability(_release(config=config), "videomme")
        == f"not comparable: {ENGINE}; {rows}; {DEMO}; {SUFFIX}"
    )
    # the other benchmark's overrides are not this one's (and mlvu's entry, first, has none)
    other = {**config, "benchmarks": [{"name": "mlvu", "limit": 3}, {"name": "videomme"}]}
    assert report._config_differences(other, "videomme", None) == [ENGINE, DEMO, SUFFIX]


@pytest.mark.parametrize("engine", [{}, {"kind": None}, None])
def test_config_differences_without_an_engine_kind_name_transformers(engine):
    config = {"engine": engine, "agent": {"frame_path": "qwen-vl-utils"}}
    expected = (
        [ENGINE]
        if engine != {"kind": None}
        else ["engine.kind=None, not a server (the release queries a vLLM server)"]
    )
    assert report._config_differences(config, "videomme", None) == expected


# ---------------------------------------------------------------------------------------------------------
# eval/readers.py: the release's readers, each case followed through utils.py step by step.

LETTER_CASES = [
    # the <answer> body first (line 113-117): without it the first stand-alone A-J, "I", would win (126)
    ("I see a dog. <answer>B</answer>", "B"),
    # a one-character body that is no letter: no stand-alone A-J in it or in the text; the first character (129)
    ("<answer>x</answer>", "<"),
    # "AB" is a substring of "ABCDEFGHIJ" but two characters: not returned whole (116); no word boundary
    # between A and B (118, 126); the first character
    ("<answer>AB</answer>", "<"),
    # the same rule for the whole reply (120-121): "CD" is not one letter; first character "C"
    ("CD", "C"),
]


@pytest.mark.parametrize(("reply", "letter"), LETTER_CASES)
def test_release_letter_single_letter_rules(reply, letter):
    assert release_letter(reply) == letter


INTERVAL_CASES = [
    # the <time> body before the whole reply (142-143): the reply's own first range is 0 - 1
    ("0 - 1 then <time>3 - 4</time>", [3.0, 4.0]),
    # clock times are minutes x 60 + seconds (147-149): 1:05.5 = 65.5, 2:10 = 130
    ("<time>1:05.5 - 2:10</time>", [65.5, 130.0]),
    # a clock range must run forwards (150): 1:00 - 1:00 is refused; the bare-number range then reads "00 - 1"
    ("1:00 - 1:00", [0.0, 1.0]),
    # and end under an hour (150): 60:00 = 3600 is refused; the bare-number range reads "00 - 60"
    ("59:00 - 60:00", [0.0, 60.0]),
    ("59:00 - 59:59.5", [3540.0, 3599.5]),
    # the bare-number range's start is its first number (153-155); the reply's first two numbers differ
    ("Around 7 s: 2 - 5", [2.0, 5.0]),
    # a bare range that does not run forwards is refused (156); the start/end keywords then (158-165)
    ("start 1, end 2: 3 - 3", [1.0, 2.0]),
    # a start without an end: the first two numbers (164-168)
    ("start: 4, then 9", [4.0, 9.0]),
]


@pytest.mark.parametrize(("reply", "interval"), INTERVAL_CASES)
def test_release_interval_fallback_order(reply, interval):
    assert release_interval(reply) == interval


def test_release_iou_is_over_the_hull_and_zero_for_an_empty_one():
    # [4, 8] with [2, 6]: intersection 6 - 4 = 2, hull 8 - 2 = 6
    assert release_iou([4.0, 8.0], [2.0, 6.0]) == pytest.approx(1 / 3)
    # a hull under a second still divides: [1, 1.5] with itself is 0.5 / 0.5
    assert release_iou([1.0, 1.5], [1.0, 1.5]) == 1.0
    # a hull of length 0 (two equal points) or less: 0 (line 175), no division
    assert release_iou([3.0, 3.0], [3.0, 3.0]) == 0.0
    assert release_iou([5.0, 3.0], [4.0, 2.0]) == 0.0  # hull max(3, 2) - min(5, 4) = -1


def test_release_score_of_no_reply_reads_nothing():
    # driver.py _score on an empty final reply: extract_letter("") = "" (129), extract_time_from_response -> None
    assert release_score(None, "mcq", "B") == (0.0, "")
    assert release_score(None, "tvg", "", (1.0, 2.0)) == (0.0, None)


# ---------------------------------------------------------------------------------------------------------
# train/media.py: merge_media by hand (a stand-in embedding table; the tower's output as float32, as a bf16 /
# float32 tower hands it to a model whose embeddings are in another dtype).


def _model(rows):
    table = torch.nn.Embedding.from_pretrained(torch.tensor(rows, dtype=torch.float64))
    return SimpleNamespace(model=SimpleNamespace(language_model=SimpleNamespace(embed_tokens=table)))


def _part(tokens, *layers):
    """An encode_media output: one item's merged tokens and its deepstack features, float32."""
    f32 = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    return SimpleNamespace(pooler_output=[f32(tokens)], deepstack_features=[[f32(x)] for x in layers])


def test_merge_media_scatters_in_the_embeddings_dtype_and_orders_deepstack_rows_by_position():
    model = _model([[0.0, 0.5], [1.0, 1.5], [2.0, 2.5], [3.0, 3.5]])
    ids = torch.tensor([[0, 1, 2, 3]])
    # position 1 a video token, position 2 an image token (mm_token_type_ids 2 and 1)
    types = torch.tensor([[0, 2, 1, 0]])
    encoded = {"image": _part([[10, 11]], [[1, 2]], [[3, 4]]), "video": _part([[20, 21]], [[5, 6]], [[7, 8]])}
    out = media.merge_media(model, ids, types, encoded)
    assert out["inputs_embeds"].dtype == torch.float64
    assert out["inputs_embeds"].tolist() == [[[0.0, 0.5], [20.0, 21.0], [10.0, 11.0], [3.0, 3.5]]]
    assert out["visual_pos_masks"].tolist() == [[False, True, True, False]]
    # per layer, the visual positions in sequence order: the video row (position 1), then the image row
    assert [t.tolist() for t in out["deepstack_visual_embeds"]] == [[[5, 6], [1, 2]], [[7, 8], [3, 4]]]
    # one kind only: its own mask and layers, the embeddings' dtype again
    only = media.merge_media(model, ids, torch.tensor([[0, 0, 1, 0]]), {"image": encoded["image"]})
    assert only["inputs_embeds"].dtype == torch.float64
    assert only["inputs_embeds"][0, 2].tolist() == [10.0, 11.0]
    assert only["visual_pos_masks"].tolist() == [[False, False, True, False]]
    assert [t.tolist() for t in only["deepstack_visual_embeds"]] == [[[1, 2]], [[3, 4]]]
    assert list(media.merge_media(model, ids, torch.zeros(1, 4, dtype=torch.long), {})) == ["inputs_embeds"]


def test_merge_media_refuses_images_and_videos_with_different_deepstack_depths():
    # one tower makes both, so the depths agree; were they to differ, no layer may be dropped silently
    model = _model([[0.0, 0.5], [1.0, 1.5], [2.0, 2.5]])
    encoded = {"image": _part([[10, 11]], [[1, 2]], [[3, 4]]), "video": _part([[20, 21]], [[5, 6]])}
    with pytest.raises(ValueError, match="zip"):
        media.merge_media(model, torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1, 2]]), encoded)
