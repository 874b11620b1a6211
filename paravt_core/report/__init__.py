"""Reports: the eval table of a run and the nightly eval trend (``trend`` pure, ``render`` HTML/MD/PNG,
``stage`` the ``paravt report`` stage and the nightly bookkeeping in object storage)."""
