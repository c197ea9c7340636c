"""The bottom layer: what every other package may import, importing none of them.

Only what packages on both sides of a layer boundary need, each module one concept: the clock
type (:mod:`common.clock`), how background tasks stop (:mod:`common.tasks`), the operator's trust
settings for code a model repository names (:mod:`common.trust`), and the contract between the
pool and the fallback chain (:mod:`common.fallback_types`). Standard library and pydantic only:
the Ray-free GPU suite imports it too (``docs/GPU.md``).
"""
