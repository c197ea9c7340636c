"""A Ray-free ``Pipeline`` over an in-process pool host."""

from __future__ import annotations

from pool.host import ModelHost
from router.catalog import ModelCatalog
from router.pipeline import Pipeline
from router.pool_client import LocalPoolClient

__all__ = ["local_pipeline"]


def local_pipeline(host: ModelHost, **kw) -> Pipeline:
    """A pipeline whose only pool is ``host``, in process."""

    async def fetch():
        return host.index()

    return Pipeline(ModelCatalog(fetch), {"cpu": LocalPoolClient(host)}, **kw)
