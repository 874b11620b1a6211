"""PARA-GRPO rewards (docs/method.md §5), one mechanism per module: ``accuracy`` (R_acc: exact match, MCQ letter,
temporal IoU, token F1), ``judge`` (the LLM judge with its token-F1 fallback), ``format`` (R_fmt with the
anchor), ``tool`` (R_tool from call records), ``terms`` (the list the total sums: those three and any added
with ``register_term``) and ``compose`` (the total, every part, the degenerate guard). Everything but
``judge`` is pure and never raises."""
