"""``paravt eval``: the seven long-video benchmarks (and the synthetic one), with and without the tool.

- ``benchmarks``: the registry; each entry reads its benchmark's real row format (``formats``), builds the
  question (SPEC §7) and names its metric groups;
- ``protocols``: the agent config of each protocol (``agentic`` with sub-agents or ``crop_frames``,
  ``direct``, ``reasoning``);
- ``scoring``: answer extraction and scores (the PARA-GRPO reward functions) and the judge for open-ended
  items; ``metrics``: accuracy with its breakdowns, MLVU micro/macro, Charades mIoU and R@k (pure);
- ``records`` (exactly-once JSONL, shard merge),
  ``runner`` (concurrent samples, retries, error accounting), ``report`` (results.json, KFP metrics, HTML);
- ``fixtures``: a few rows of every benchmark in its real schema pointing at synthetic videos;
- ``stage``: ``run(cfg) -> StageResult``.
"""
