"""Tool-call, answer and tag parsing (docs/method.md §4.3): per-block results, legacy form, never raising."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paravt_core.agent.parsing import (
    _short,
    call_window,
    extract_answer,
    format_tool_call,
    has_tool_call,
    lenient_time,
    lenient_window,
    open_tag_at_end,
    parse_tool_calls,
    parse_tool_calls_as_released,
    think_spans,
)
from paravt_core.agent.prompts import load_prompt_set
from paravt_core.video.errors import InvalidTimeError


def test_a_malformed_block_does_not_discard_its_siblings():
    text = (
        "<think>look twice</think>\n"
        '<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 1, "end_time": 4}}\n</tool_call>\n'
        '<tool_call>\n{"name": "crop_video", "arguments": {"start_time": 2,,}}\n</tool_call>\n'
        '<tool_call>{"name": "crop_video", "arguments": {"start": "01:05", "end": "1:10"}}</tool_call>'
    )
    calls = parse_tool_calls(text)
    assert [c.ok for c in calls] == [True, False, True]
    assert [c.index for c in calls] == [0, 1, 2]
    assert calls[0].arguments == {"start_time": 1, "end_time": 4}
    assert "not valid JSON" in calls[1].error
    assert calls[2].arguments == {"start": "01:05", "end": "1:10"}
    assert call_window(calls[2].arguments) == (65.0, 70.0)


@pytest.mark.parametrize(
    ("body", "error_part"),
    [
        ("", "empty"),
        ("[1, 2]", "JSON object"),
        ('{"arguments": {}}', '"name"'),
        ('{"name": "crop_video"}', '"arguments"'),
        ('{"name": "crop_video", "arguments": "not json"}', "arguments"),
    ],
)
def test_bad_json_bodies_give_errors(body, error_part):
    (call,) = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert not call.ok and error_part in call.error


def test_double_encoded_arguments_and_parameters_key_are_accepted():
    text = '<tool_call>{"name": "crop_video", "arguments": "{\\"start_time\\": 3, \\"end_time\\": 5}"}</tool_call>'
    assert parse_tool_calls(text)[0].arguments == {"start_time": 3, "end_time": 5}
    text = '<tool_call>{"name": "crop_video", "parameters": {"start_time": 3, "end_time": 5}}</tool_call>'
    assert parse_tool_calls(text)[0].arguments == {"start_time": 3, "end_time": 5}


def test_closing_tag_inside_a_json_string_does_not_end_the_block():
    args = {"video_path": "a</tool_call>b", "start_time": 0, "end_time": 1}
    (call,) = parse_tool_calls(format_tool_call("crop_video", args))
    assert call.ok and call.arguments == args


def test_unterminated_blocks():
    calls = parse_tool_calls(
        '<tool_call>{"name": "crop_video" <tool_call>{"name": "x", "arguments": {}}</tool_call>'
    )
    assert [c.ok for c in calls] == [False, True]
    assert "not closed" in calls[0].error
    (call,) = parse_tool_calls("text <tool_call>\n{")
    assert not call.ok and call.span == (5, len("text <tool_call>\n{"))


def test_legacy_tool_code_form():
    text = (
        "<tool_code>crop_video(start_time=10, end_time='00:20')</tool_code>"
        "<tool_code>crop_video(3, 7.5)</tool_code>"
        "<tool_code>crop_video('v.mp4', 1, 2)</tool_code>"
        "<tool_code>```python\ncrop_video(start=1, end=2)\n```</tool_code>"
        "<tool_code>__import__('os').system('x')</tool_code>"
        "<tool_code>crop_video(start_time=open('f'))</tool_code>"
        "<tool_code>crop_video(start_time={1, 2}, end_time=(3,))</tool_code>"
    )
    calls = parse_tool_calls(text)
    assert calls[0].arguments == {"start_time": 10, "end_time": "00:20"}
    assert calls[1].arguments == {"start_time": 3, "end_time": 7.5}
    assert calls[2].arguments == {"video_path": "v.mp4", "start_time": 1, "end_time": 2}
    assert calls[3].arguments == {"start": 1, "end": 2}
    assert not calls[4].ok and not calls[5].ok  # nothing is evaluated
    assert not calls[6].ok and "literal numbers or strings" in calls[6].error  # JSON-safe values only
    assert all(c.form == "tool_code" for c in calls)


def test_both_forms_in_order_of_appearance():
    text = "<tool_code>crop_video(1, 2)</tool_code>" + format_tool_call(
        "crop_video", {"start_time": 3, "end_time": 4}
    )
    assert [c.form for c in parse_tool_calls(text)] == ["tool_code", "tool_call"]
    assert has_tool_call(text) and not has_tool_call("<answer>A</answer>")


def test_times_in_call_arguments():
    assert call_window({"start_time": "1:02:03", "end_time": "3723.5"}) == (3723.0, 3723.5)
    assert call_window({"start_time": 5, "end": "00:07"}) == (5.0, 7.0)
    for bad in [{"end_time": 4}, {"start_time": "soon", "end_time": 4}, {"start_time": -1, "end_time": 2}]:
        with pytest.raises(InvalidTimeError):
            call_window(bad)


def test_answers_and_open_tags():
    assert extract_answer("<answer>A</answer> then <answer> C </answer>") == "C"
    assert extract_answer("<answer>unclosed") is None
    assert extract_answer("no answer") is None
    assert open_tag_at_end("<think>abc") == "think"
    assert open_tag_at_end("<think>a</think><answer>The ev") == "answer"
    assert open_tag_at_end('<think>a</think><tool_call>{"name"') == "tool_call"
    assert open_tag_at_end("<think>a</think><answer>b</answer>") is None


# The released tool schema (docs/method.md §4.1), written out here: the independent expectation for the set's.
SPEC_SCHEMA = (
    '{"type":"function","function":{"name":"crop_video","description":"Analyze a cropped video segment by '
    'sampling frames from a specific time range.","parameters":{"type":"object","properties":{"video_path":'
    '{"type":"string","description":"Path to the video file"},"start_time":{"type":"number","description":'
    '"Start time in seconds"},"end_time":{"type":"number","description":"End time in seconds"}},"required":'
    '["video_path","start_time","end_time"]}}}'
)
# The released forced-answer texts (docs/method.md §4.2), written out here.
SPEC_FORCED = {
    "mcq": "Based on the video and cropped segments above, answer with ONLY the letter.",
    "tvg": "Based on the video and any cropped segments, provide your final answer about when the event "
    "happens. Use the format: 'The event happens in the X.X - Y.Y seconds.'",
}


def test_protocol_texts():
    ps = load_prompt_set("paravt-v1")
    # the schema line is docs/method.md §4.1's JSON, in its key order, with json.dumps' default ", " / ": " separators
    spec = json.loads(SPEC_SCHEMA)
    assert json.loads(ps.tool_schema) == spec
    assert list(json.loads(ps.tool_schema)["function"]["parameters"]["properties"]) == [
        "video_path",
        "start_time",
        "end_time",
    ]
    assert ps.tool_schema == json.dumps(spec)  # stdlib serialization of SPEC's text, key order kept

    # agentic_minimal: the Qwen/Hermes envelope, line by line, the <tools> block holding exactly the schema
    assert ps.system_prompt("agentic_minimal").split("\n") == [
        "# Tools",
        "",
        "You may call one or more functions to assist with the user query.",
        "",
        "You are provided with function signatures within <tools></tools> XML tags:",
        "<tools>",
        ps.tool_schema,
        "</tools>",
        "",
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:",
        "<tool_call>",
        '{"name": <function-name>, "arguments": <args-json-object>}',
        "</tool_call>",
    ]
    general = ps.system_prompt("agentic_general")
    assert general.startswith(
        "You are a video understanding agent that can analyze videos by cropping and examining specific "
        "segments.\n"
    )
    assert re.findall(r"<tools>\n(.*?)\n</tools>", general, re.DOTALL) == [ps.tool_schema]
    # docs/method.md §4.2's example call, inside a call block, then the parallel note, then the strict format
    example = '{"name": "crop_video", "arguments": {"video_path": "...", "start_time": 0, "end_time": 10}}'
    assert f"<tool_call>\n{example}\n</tool_call>" in general
    assert "multiple <tool_call> blocks in one turn" in general
    fmt = general[general.index("Use strictly this format:") :].split("\n")
    assert [line.split(">")[0] + ">" for line in fmt[1:]] == ["<think>", "<tool_call>", "<answer>"]
    assert {k: v.text for k, v in ps.forced_answer.items()} == SPEC_FORCED
    assert {k: v.max_tokens for k, v in ps.forced_answer.items()} == {"mcq": 64, "tvg": 128}

    assert ps.question_with_suffix("Q?", "v.mp4") == "Q? The video path for this video is: v.mp4"
    assert ps.question_with_suffix("Q? The video path for this video is: v.mp4", "v.mp4") == (
        "Q? The video path for this video is: v.mp4"
    )
    text = ps.subagent_prompt(65.0, 130.5)
    # 65 s = 01:05, 130.5 s = 02:10, duration 130.5 - 65 = 65.5
    assert "from 01:05 to 02:10 (duration: 65.5 seconds)" in text and "question" not in text
    assert text.endswith("Describe what you see rather than interpreting it.\n\nSummary:")
    assert ps.subagent_prompt(0, 10, "Which colour?").endswith(
        "interpreting it.\n\nThe main agent is answering this question about the whole video: Which colour?"
        "\n\nSummary:"
    )
    with pytest.raises(ValueError, match="agentic_general"):
        ps.system_prompt("nope")  # type: ignore[arg-type]


def test_calls_inside_closed_think_blocks_are_reasoning():
    call = format_tool_call("crop_video", {"start_time": 1, "end_time": 2})
    # a call after </think> is a call; its span starts after the think block
    text = "<think>look at 1-2 s</think>\n" + call
    (parsed,) = parse_tool_calls(text)
    assert parsed.ok and parsed.span == (len("<think>look at 1-2 s</think>\n"), len(text))
    # mentioned inside a closed think block: reasoning, no call
    mention = "<think>I could write " + call + " but I know the answer</think><answer>B</answer>"
    assert parse_tool_calls(mention) == [] and not has_tool_call(mention)
    # both: only the one outside counts
    both = (
        "<think>maybe "
        + call
        + "?</think>"
        + format_tool_call("crop_video", {"start_time": 5, "end_time": 6})
    )
    assert [c.arguments for c in parse_tool_calls(both)] == [{"start_time": 5, "end_time": 6}]
    # an unclosed think followed by a call stays a call (a turn written without </think>)
    unclosed = "<think>I need frames " + call
    (parsed,) = parse_tool_calls(unclosed)
    assert parsed.ok and parsed.arguments == {"start_time": 1, "end_time": 2}
    # a second think block after the call hides only what it encloses
    text = call + "<think>" + call + "</think>" + call
    assert [c.span[0] for c in parse_tool_calls(text)] == [0, 2 * len(call) + len("<think></think>")]


# -- properties --------------------------------------------------------------------------------------------

TAG_PIECES = [
    "<tool_call>",
    "</tool_call>",
    "<tool_code>",
    "</tool_code>",
    "<answer>",
    "</answer>",
    "{",
    "}",
    '"',
]
noisy_text = st.lists(st.one_of(st.text(max_size=20), st.sampled_from(TAG_PIECES)), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(noisy_text)
def test_parsing_never_raises(text):
    calls = parse_tool_calls(text)
    for call in calls:
        assert call.ok == (call.name is not None and call.arguments is not None and call.error is None)
        assert 0 <= call.span[0] < call.span[1] <= len(text)
    for call in parse_tool_calls_as_released(text):  # the release layout's reader: never raises either
        assert call.ok == (call.arguments is not None) and not (call.skipped and call.ok)
        lenient_window(call.arguments or {})
    extract_answer(text)
    open_tag_at_end(text)


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3),
    max_leaves=10,
)
calls_strategy = st.lists(
    st.tuples(
        st.text(min_size=1).filter(lambda s: s.strip()),
        st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    ),
    min_size=1,
    max_size=6,
)
free_text = st.text().filter(lambda s: "<tool_call>" not in s and "<tool_code>" not in s)


@settings(max_examples=200, deadline=None)
@given(calls_strategy, st.lists(free_text, min_size=7, max_size=7))
def test_well_formed_calls_round_trip(calls, gaps):
    text = gaps[0] + "".join(format_tool_call(n, a) + g for (n, a), g in zip(calls, gaps[1:], strict=False))
    parsed = parse_tool_calls(text)
    assert [(c.name, c.arguments) for c in parsed] == calls
    assert all(c.ok and c.form == "tool_call" for c in parsed)


# The released eval driver's reading (paravt/eval/driver.py parse_tool_calls, utils.parse_time_val at cf55249).


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(12, 12.0), (-3, -3.0), (True, 1.0), ("7.5", 7.5), (" 8 ", 8.0), ("01:30", 90.0), ("1:02:03", 3723.0),
     ("1:2:3:4", 0.0), ("12.5s", 0.0), ("soon", 0.0), (None, 0.0), ([1], 0.0), ("a:b", 0.0), (10**400, 0.0)],
)  # fmt: skip
def test_lenient_time_reads_as_the_released_driver(value, seconds):
    assert lenient_time(value) == seconds


def test_lenient_window_defaults():
    assert lenient_window({}) == (0.0, 10.0)
    assert lenient_window({"start": "0:05"}) == (5.0, 15.0)
    assert lenient_window({"start_time": 3, "end": 4}) == (3.0, 4.0)
    assert lenient_window({"start_time": 3, "end_time": None, "end": 9}) == (3.0, 0.0)  # end_time given: read


def test_released_reader_order_names_and_ignored_blocks():
    text = (
        '<think>maybe <tool_call>{"name": "crop_video", "arguments": {"start_time": 1}}</tool_call></think>'
        "<tool_code>crop_video(start_time=2, end_time='4')</tool_code>"
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"name": "zoom", "arguments": {"start": 5}}</tool_call>'
        '<tool_call>{"arguments": {"start": 6}}</tool_call>'
        "<tool_code>zoom_in(start_time=1)</tool_code>"
        "<tool_call>[1, 2]</tool_call>"
        '<tool_call>{"name": "crop_video"}</tool_call><tool_call>{"name": "crop_video"'
    )
    calls = parse_tool_calls_as_released(text)
    got = [(c.form, c.name, c.arguments, c.ok, c.skipped) for c in calls]
    assert got == [
        ("tool_call", "crop_video", {"start_time": 1}, True, False),  # inside think: still a call
        ("tool_call", None, None, False, True),  # not JSON: ignored
        ("tool_call", "zoom", {"start": 5}, True, False),  # the name is not checked
        ("tool_call", None, {"start": 6}, True, False),  # no name
        ("tool_call", None, None, False, False),  # not an object: the driver ends the sample; ours an error
        ("tool_call", "crop_video", {}, True, False),  # no arguments: {}
        (
            "tool_code",
            "crop_video",
            {"start_time": 2.0, "end_time": 4.0},
            True,
            False,
        ),  # after every tool_call
        ("tool_code", None, None, False, True),  # another name in tool_code: ignored
    ]
    assert [c.index for c in calls] == list(range(8))


NOT_A_CALL = "the <tool_code> block is not a call like crop_video(start_time=.., end_time=..)"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("", "the <tool_code> block is empty"),
        ("   ", "the <tool_code> block is empty"),
        ("x" * 4001, "the <tool_code> block is too long"),  # the bound is 4000 characters
        ("crop_video(", NOT_A_CALL),  # a syntax error
        ("x + 1", NOT_A_CALL),  # an expression, not a call
    ],
)
def test_tool_code_errors_are_the_models_messages(body: str, error: str) -> None:
    (call,) = parse_tool_calls(f"<tool_code>{body}</tool_code>")
    assert (call.name, call.arguments, call.error) == (None, None, error)


LITERALS_ONLY = "<tool_code> arguments must be literal numbers or strings"


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ("crop_video(start_time=open('f'))", LITERALS_ONLY),  # not a literal: nothing is evaluated
        ("crop_video(start_time={1, 2})", LITERALS_ONLY),  # a literal, but not a number or string
        ("crop_video(1)", "<tool_code> takes start_time and end_time (and optionally video_path)"),
        ("crop_video(**a)", "**arguments are not supported in <tool_code>"),
    ],
)
def test_tool_code_errors_after_the_name_keep_the_name(body: str, error: str) -> None:
    (call,) = parse_tool_calls(f"<tool_code>{body}</tool_code>")
    assert (call.name, call.arguments, call.error) == ("crop_video", None, error)


def test_a_tool_code_body_of_exactly_the_bound_is_parsed() -> None:
    body = "crop_video(1, 2" + " " * (4000 - 16) + ")"
    assert len(body) == 4000
    (call,) = parse_tool_calls(f"<tool_code>{body}</tool_code>")
    assert (call.name, call.arguments, call.error) == ("crop_video", {"start_time": 1, "end_time": 2}, None)


def test_a_fenced_tool_code_loses_only_its_backticks() -> None:
    """```X(1, 2)```: the fence's backticks go, the call of a function named X stays."""
    (call,) = parse_tool_calls("<tool_code>```X(1, 2)```</tool_code>")
    assert (call.name, call.arguments, call.error) == ("X", {"start_time": 1, "end_time": 2}, None)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"start_time": -1, "end_time": 2}, "start_time must not be negative, got -1"),
        ({"start": 1, "end_time": "x"}, "end_time must be seconds (e.g. 12.5) or MM:SS or HH:MM:SS, got 'x'"),
        ({}, "start_time is missing"),
        ({"start_time": 1}, "end_time is missing"),
    ],
)
def test_call_window_errors_name_the_argument(arguments: dict, message: str) -> None:
    with pytest.raises(ValueError) as info:
        call_window(arguments)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "tag"),
    [
        ("<think>a</think><think>b", "think"),  # the LAST opening is the one left open
        ("</answer><answer>x", "answer"),  # a closing tag before the opening closes nothing
        ("<think>a</think><answer>B</answer>", None),
        ("<think>a<tool_call>{", "tool_call"),  # both open: the later one
    ],
)
def test_open_tag_at_end_by_hand(text: str, tag: str | None) -> None:
    assert open_tag_at_end(text) == tag


def test_short_cuts_long_error_details_at_120_characters() -> None:
    """JSON decoder messages are echoed to the model through ``_short``: up to 120 characters whole,
    longer ones cut to 120 + "..."."""
    assert _short("x" * 120) == "x" * 120
    assert _short("x" * 121) == "x" * 120 + "..."
    assert _short("abc", limit=2) == "ab..."
    with pytest.raises(json.JSONDecodeError) as err:  # the detail is the json module's own message
        json.loads("{")
    (call,) = parse_tool_calls("<tool_call>{</tool_call>")
    assert call.error == f"the <tool_call> body is not valid JSON ({err.value})"


@pytest.mark.parametrize(
    ("text", "raw", "error"),
    [
        ("<tool_call>  </tool_call>", "  ", "the <tool_call> block is empty"),
        (
            "<tool_call>[1]</tool_call>",
            "[1]",
            'the <tool_call> body must be a JSON object {"name": ..., "arguments": {...}}',
        ),
    ],
)
def test_tool_call_errors_are_the_models_messages(text: str, raw: str, error: str) -> None:
    (call,) = parse_tool_calls(text)
    assert (call.raw, call.name, call.error) == (raw, None, error)


def test_only_whitespace_may_precede_the_json_object_of_a_block() -> None:
    """``X{...}``: not a JSON object at the block's start, so the block ends at the first closing tag (the
    one inside the would-be string) and its body is the text before it."""
    (call,) = parse_tool_calls('<tool_call>X{"a": "</tool_call>"}</tool_call>')
    assert call.raw == 'X{"a": "' and call.span == (0, 31)


def test_think_spans_by_hand() -> None:
    """ "a" (0), <think> at 1, "x" at 8, </think> at 9-16 -> (1, 17); "b" at 17, <think> at 18, "y" at 25,
    </think> at 26-33 -> (18, 34); an unclosed third block hides nothing."""
    assert think_spans("a<think>x</think>b<think>y</think><think>z") == [(1, 17), (18, 34)]


@pytest.mark.parametrize(
    ("body", "name", "error"),
    [
        ('{"arguments": {}}', None, 'the tool call has no "name" string'),
        (
            '{"name": "crop_video", "arguments": "nope"}',
            "crop_video",
            'the "arguments" string is not a JSON object',
        ),
        (
            '{"name": "crop_video", "arguments": [1]}',
            "crop_video",
            'the tool call needs an "arguments" JSON object',
        ),
    ],
)
def test_tool_call_object_errors(body: str, name: str | None, error: str) -> None:
    (call,) = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert (call.name, call.arguments, call.error) == (name, None, error)
