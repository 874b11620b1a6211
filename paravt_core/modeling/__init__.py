"""Pieces of the tiny Qwen3-VL build (tokenizer training, chat template); the public API is paravt_core.models."""
