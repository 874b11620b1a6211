"""Encoded images and videos into the language model, the same way under every transformers version we meet.

transformers 5.19's ``Qwen3VLModel.forward`` takes pre-encoded media as ``mm_encoder_outputs``; 5.17's (the
image a lent GPU runs) has no such argument, lets it fall into ``**kwargs`` and drops it: the model trains
on text alone and nothing says so. So the training forward does not go through ``Qwen3VLModel.forward``: it
embeds the tokens, scatters the tower's merged tokens into the image / video placeholder positions (marked by
``mm_token_type_ids``: 1 image, 2 video, the processor's own marking) and hands the deepstack features to the
language model (``Qwen3VLTextModel``), whose ``visual_pos_masks`` / ``deepstack_visual_embeds`` arguments are
the same in 5.17 and 5.19. :func:`require_media_path` refuses a language model without those named arguments
(they would land in ``**kwargs`` and be dropped too).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

NEEDED = ("inputs_embeds", "visual_pos_masks", "deepstack_visual_embeds")
CODES = (("image", 1), ("video", 2))  # mm_token_type_ids of each kind


@functools.cache
def _missing(cls: type) -> tuple[str, ...]:
    params = inspect.signature(cls.forward).parameters
    return tuple(name for name in NEEDED if name not in params)


def require_media_path(model: Any) -> None:
    """Raise unless ``model``'s (a Qwen3-VL for conditional generation) language model takes media as named
    arguments: a training run on a transformers that would drop the images must not start."""
    import transformers

    lm = model.model.language_model
    missing = _missing(type(lm))
    if missing:
        raise RuntimeError(
            f"transformers {transformers.__version__}: {type(lm).__name__}.forward has no "
            f"{', '.join(missing)} argument, so images and videos would be dropped; refusing to train"
        )


def _scatter(embeds: torch.Tensor, mask: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``embeds`` [1, L, D] with its ``mask`` [1, L] positions replaced, in order, by ``rows`` [n, D]."""
    return embeds.masked_scatter(mask[..., None].expand_as(embeds), rows.to(embeds.device, embeds.dtype))


def merge_media(model: Any, input_ids: torch.Tensor, mm_types: torch.Tensor, encoded: dict) -> dict[str, Any]:
    """The language model's keyword arguments for ``input_ids`` [1, L] with ``encoded`` media
    (``encode_media``'s ``{"image"|"video": output with split pooler_output and deepstack_features}``):
    ``inputs_embeds`` and, with media, ``visual_pos_masks`` [1, L] and ``deepstack_visual_embeds`` (one
    [visual tokens, D] tensor per deepstack layer, rows in sequence order)."""
    embeds = model.model.language_model.embed_tokens(input_ids)
    if not encoded:
        return {"inputs_embeds": embeds}
    masks, deep = {}, {}
    for name, code in CODES:
        part = encoded.get(name)
        if part is None:
            continue
        masks[name] = mm_types == code
        embeds = _scatter(embeds, masks[name], torch.cat(list(part.pooler_output)))
        deep[name] = [torch.cat(list(layer)) for layer in part.deepstack_features]
    if len(masks) == 1:
        (name,) = masks
        return {
            "inputs_embeds": embeds,
            "visual_pos_masks": masks[name],
            "deepstack_visual_embeds": deep[name],
        }
    visual = masks["image"] | masks["video"]
    joint_image = masks["image"][visual]  # among the visual positions, which are images
    stacked = []
    for img, vid in zip(deep["image"], deep["video"], strict=True):
        joint = img.new_zeros(img.shape[0] + vid.shape[0], img.shape[-1])
        joint = joint.masked_scatter(joint_image[:, None].expand_as(joint), img)
        stacked.append(joint.masked_scatter((~joint_image)[:, None].expand_as(joint), vid))
    return {"inputs_embeds": embeds, "visual_pos_masks": visual, "deepstack_visual_embeds": stacked}
