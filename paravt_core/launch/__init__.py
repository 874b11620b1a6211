"""Launching a training stage beyond one pod: multi-node jobs on Kubernetes (``trainjob``)."""
