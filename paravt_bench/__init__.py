"""Code that the benchmarks, the GPU scripts and the tests share, so none of them imports another's runnable
file: the scoring oracle's corpus and references, the Qwen3-VL-2B-shaped random model and the synthetic inputs
of the GPU profiles. Not part of the library: no module of ``paravt_core``, ``pipelines`` or ``components``
imports it, and the images do not hold it."""
