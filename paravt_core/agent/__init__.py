"""The ParaVT agent: protocol constants (``prompts``), tool-call parsing (``parsing``), exact token accounting
(``segments``, ``conversation``), the episode loop with parallel sub-agents (``episode``: ``arun_episode``,
``run_episode``) and ``paravt agent run`` (``run_cli``).

Kept import-free on purpose: ``paravt``'s argument parser imports ``run_cli`` and must not pull in torch.
"""
