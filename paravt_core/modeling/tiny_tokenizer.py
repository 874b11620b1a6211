"""A small byte-level BPE tokenizer laid out like Qwen3-VL's, trained locally with the `tokenizers` library.

Layout (mirrors Qwen2Tokenizer / Qwen3-VL): NFC normalizer, Qwen's pre-tokenization regex followed by
byte-level mapping, byte-level decoder; the trained BPE vocabulary first, then the added tokens in Qwen's
order (``<|endoftext|>`` … ``</think>``), then ParaVT's ``<answer>`` / ``</answer>``. Special tokens are
flagged exactly as in Qwen3-VL: the 14 ``<|…|>`` chat/vision tokens are special; the tool, FIM and think
tokens are plain added tokens (kept by ``skip_special_tokens`` decoding). eos is ``<|im_end|>``, pad is
``<|endoftext|>``, there is no bos and no unk.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer

# Same pattern as Qwen2's tokenizer (contractions, letters, single digits, punctuation runs, whitespace).
QWEN_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

# (token, special) in Qwen3-VL's id order (151643 … 151668 there).
QWEN_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
# ParaVT's answer tags are not single tokens in Qwen3-VL; the tiny model makes them single tokens so
# tiny generations stay short. Code must never rely on them being one token.
PARAVT_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (("<answer>", False), ("</answer>", False))
ADDED_TOKENS = QWEN_ADDED_TOKENS + PARAVT_ADDED_TOKENS

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
# Upper bound on trained pieces (incl. the 256 byte symbols); the built-in corpus saturates at 896.
BPE_VOCAB_SIZE = 1024

_ENGLISH = """\
The video shows a person walking into a kitchen and opening the refrigerator.
A red circle appears in the top left corner and stays there for three seconds.
Then a blue square moves from the left side of the frame to the right side.
The camera is still while a green triangle slowly fades in near the center.
Someone picks up a cup from the table, drinks from it and puts it back down.
A man in a black jacket is talking to a woman who is holding a small dog.
The children run across the park, and one of them throws a yellow ball.
At the end of the clip the screen turns white and a short title is shown.
What happens after the person closes the door? Answer with the letter only.
Which object appears first in the video, the circle, the square or the triangle?
When does the blue square start to move? Give the start and end time in seconds.
Describe the main actions in the video and the order in which they happen.
The event happens in the 3.5 - 7.0 seconds.
The shapes appear one after another, each in a different colour and place.
I need to look at the middle part of the video more closely before I answer.
Let me crop the first ten seconds and the last ten seconds to compare them.
The segment from 00:12 to 00:20 shows the square moving across the screen.
These frames are sampled from a short segment of a longer video.
Summarize the key actions, the objects and people, and the temporal flow.
Based on the video and cropped segments above, answer with ONLY the letter.
You are a video understanding agent that can analyze videos by cropping and examining specific segments.
You may call the tool several times in one turn to analyze different segments in parallel.
A. The circle turns red.  B. The square moves right.  C. The triangle disappears.  D. Nothing changes.
The answer is B because the square moves from left to right between four and six seconds.
It is a sunny day, the street is busy, and a bus stops in front of a small shop.
She opens a book, reads for a while, and then writes something in a notebook.
Numbers like 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12.5, 30 and 64 are common in questions.
"""

_TAGGED = """\
<think>
The question asks when the square moves. I will crop two segments.
</think>
<tool_call>
{"name": "crop_video", "arguments": {"video_path": "video.mp4", "start_time": 0, "end_time": 10}}
</tool_call>
<tool_call>
{"name": "crop_video", "arguments": {"video_path": "video.mp4", "start_time": 10.5, "end_time": 20}}
</tool_call>
<tool_response>
The segment from 00:00 to 00:10 shows a red circle in the top left corner.
</tool_response>
<answer>B</answer>
<answer>The event happens in the 4.0 - 6.5 seconds.</answer>
<0.2 seconds><1.4 seconds><2.5 seconds><12.3 seconds><63.0 seconds>
<tools>
{"type": "function", "function": {"name": "crop_video", "description": "Analyze a cropped video segment \
by sampling frames from a specific time range.", "parameters": {"type": "object", "properties": \
{"video_path": {"type": "string", "description": "Path to the video file"}, "start_time": {"type": "number", \
"description": "Start time in seconds"}, "end_time": {"type": "number", "description": "End time in seconds"}}, \
"required": ["video_path", "start_time", "end_time"]}}}
</tools>
# Tools
You may call one or more functions to assist with the user query.
For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
"""


def training_corpus() -> list[str]:
    """Built-in corpus: English sentences plus the tags, tool JSON and timestamps ParaVT prompts use."""
    lines = [line for line in (_ENGLISH + _TAGGED).splitlines() if line.strip()]
    # Repetition weights the ParaVT-specific strings so their merges are learned early.
    return lines * 4 + _TAGGED.splitlines() * 8


def _backend() -> Tokenizer:
    """An untrained BPE with Qwen2Tokenizer's normalizer, pre-tokenizer and decoder."""
    tok = Tokenizer(BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(vocab_size: int = BPE_VOCAB_SIZE) -> Tokenizer:
    """Train the BPE on :func:`training_corpus` and append :data:`ADDED_TOKENS` in order.

    The trainer is deterministic for a fixed corpus; the added tokens take ids ``len(bpe) …`` in order.
    """
    tok = _backend()
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        special_tokens=[],
    )
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    base = tok.get_vocab_size()
    for offset, (content, special) in enumerate(ADDED_TOKENS):
        token = AddedToken(content, special=special, normalized=False, lstrip=False, rstrip=False)
        added = tok.add_special_tokens([token]) if special else tok.add_tokens([token])
        if added != 1 or tok.token_to_id(content) != base + offset:
            raise RuntimeError(f"added token {content!r} did not get id {base + offset}")
    return tok


def tokenizer_config(tok: Tokenizer) -> dict:
    """``tokenizer_config.json`` content in Qwen3-VL's shape, for the ids of ``tok``."""
    decoder = {}
    for content, special in ADDED_TOKENS:
        decoder[str(tok.token_to_id(content))] = {
            "content": content,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "extra_special_tokens": [c for c, special in QWEN_ADDED_TOKENS if special and c != PAD_TOKEN],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOS_TOKEN,
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": PAD_TOKEN,
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_tokenizer_files(out_dir: str | Path, vocab_size: int = BPE_VOCAB_SIZE) -> Path:
    """Train and write ``tokenizer.json`` + ``tokenizer_config.json`` (the on-disk form of a Qwen checkpoint)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(vocab_size)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(tok), indent=2) + "\n")
    return out
