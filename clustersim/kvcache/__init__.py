"""KV-cache memory: block allocators and capacity (pure, no simpy)."""

from clustersim.kvcache.paged import BlockPool, KVAccountingError

__all__ = ["BlockPool", "KVAccountingError"]
