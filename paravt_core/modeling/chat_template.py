"""The tiny model's Qwen-style chat template and the video-marker fix shared with real checkpoints.

The template follows the observable format of Qwen3-VL-Instruct's template (ChatML turns, the Hermes
``# Tools`` envelope with the same sentences, ``tool_calls`` rendered as ``<tool_call>`` JSON blocks, ``tool``
messages grouped into one user turn of ``<tool_response>`` blocks) with two deliberate differences:

* a video part renders as a bare ``<|video_pad|>``. transformers 5.x's ``Qwen3VLProcessor`` expands that one
  token into ``<t seconds><|vision_start|><|video_pad|>*n<|vision_end|>`` per temporal group. Qwen3-VL's own
  template wraps the pad in ``<|vision_start|>…<|vision_end|>``, which older processors swallowed but 5.x
  nests (``<|vision_start|><0.2 seconds><|vision_start|>…``). :func:`unnest_video_markers` applies the same
  fix to a real checkpoint's template so both produce the layout Qwen3-VL was trained on.
* OpenAI-style ``image_url`` / ``video_url`` parts are accepted wherever ``image`` / ``video`` parts are (the
  ParaVT parquets use the OpenAI names), and an unknown part type is an error instead of being dropped.
"""

from __future__ import annotations

# Sentences of the Hermes tool envelope, exactly as Qwen3 / Qwen3-VL render them (protocol constants:
# a checkpoint only follows the tool format it was trained on).
TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call>"
)

IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
VIDEO_PLACEHOLDER = "<|video_pad|>"
WRAPPED_VIDEO_PLACEHOLDER = "<|vision_start|><|video_pad|><|vision_end|>"


def _jinja_str(text: str) -> str:
    """Quote ``text`` as a Jinja string literal (single quotes, escaped backslashes and newlines)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


# The environment transformers renders with uses trim_blocks + lstrip_blocks, so the layout below is
# free to be readable: only the {{- … }} expressions produce output.
CHAT_TEMPLATE = (
    """
{%- macro part_kind(part) -%}
    {%- if part.type is defined and part.type -%}{{ part.type }}
    {%- elif 'image' in part or 'image_url' in part -%}image
    {%- elif 'video' in part or 'video_url' in part -%}video
    {%- else -%}text{%- endif -%}
{%- endmacro -%}
{%- macro render_content(content, role) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is none or content is undefined -%}
    {%- else -%}
        {%- for part in content -%}
            {%- set kind = part_kind(part) -%}
            {%- if kind == 'text' -%}
                {{- part.text -}}
            {%- elif kind in ['image', 'image_url'] -%}
                {%- if role in ['system', 'assistant'] -%}
                    {{- raise_exception(role ~ ' messages cannot contain images') -}}
                {%- endif -%}
                {{- IMAGE_PLACEHOLDER -}}
            {%- elif kind in ['video', 'video_url'] -%}
                {%- if role in ['system', 'assistant'] -%}
                    {{- raise_exception(role ~ ' messages cannot contain videos') -}}
                {%- endif -%}
                {{- VIDEO_PLACEHOLDER -}}
            {%- else -%}
                {{- raise_exception('unsupported content part type: ' ~ kind) -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if not messages -%}
    {{- raise_exception('no messages to render') -}}
{%- endif -%}
{%- if tools -%}
    {{- '<|im_start|>system\\n' -}}
    {%- if messages[0].role == 'system' -%}
        {{- render_content(messages[0].content, 'system') + '\\n\\n' -}}
    {%- endif -%}
    {{- TOOLS_PREAMBLE -}}
    {%- for tool in tools -%}
        {{- '\\n' + (tool | tojson) -}}
    {%- endfor -%}
    {{- TOOLS_POSTAMBLE + '<|im_end|>\\n' -}}
{%- elif messages[0].role == 'system' -%}
    {{- '<|im_start|>system\\n' + render_content(messages[0].content, 'system') + '<|im_end|>\\n' -}}
{%- endif -%}
{%- for message in messages -%}
    {%- if message.role == 'system' -%}
        {%- if not loop.first -%}
            {{- '<|im_start|>system\\n' + render_content(message.content, 'system') + '<|im_end|>\\n' -}}
        {%- endif -%}
    {%- elif message.role == 'user' -%}
        {{- '<|im_start|>user\\n' + render_content(message.content, 'user') + '<|im_end|>\\n' -}}
    {%- elif message.role == 'assistant' -%}
        {%- set text = render_content(message.content, 'assistant') -%}
        {{- '<|im_start|>assistant\\n' + text -}}
        {%- if message.tool_calls -%}
            {%- for call in message.tool_calls -%}
                {%- if text or not loop.first -%}
                    {{- '\\n' -}}
                {%- endif -%}
                {%- set fn = call.function if call.function is defined and call.function else call -%}
                {{- '<tool_call>\\n{"name": "' + fn.name + '", "arguments": ' -}}
                {%- if fn.arguments is string -%}
                    {{- fn.arguments -}}
                {%- else -%}
                    {{- fn.arguments | tojson -}}
                {%- endif -%}
                {{- '}\\n</tool_call>' -}}
            {%- endfor -%}
        {%- endif -%}
        {{- '<|im_end|>\\n' -}}
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\\n<tool_response>\\n' + render_content(message.content, 'tool') + '\\n</tool_response>' -}}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
            {{- '<|im_end|>\\n' -}}
        {%- endif -%}
    {%- else -%}
        {{- raise_exception('unsupported message role: ' ~ message.role) -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\\n' -}}
{%- endif -%}
""".strip()
    .replace("IMAGE_PLACEHOLDER", _jinja_str(IMAGE_PLACEHOLDER))
    .replace("VIDEO_PLACEHOLDER", _jinja_str(VIDEO_PLACEHOLDER))
    .replace("TOOLS_PREAMBLE", _jinja_str(TOOLS_PREAMBLE))
    .replace("TOOLS_POSTAMBLE", _jinja_str(TOOLS_POSTAMBLE))
)


def unnest_video_markers(template: str) -> str:
    """Make a Qwen3-VL template emit a bare ``<|video_pad|>`` for video parts (see the module docstring).

    Idempotent, and a no-op on templates without the wrapped placeholder (e.g. the tiny model's).
    """
    return template.replace(WRAPPED_VIDEO_PLACEHOLDER, VIDEO_PLACEHOLDER)
