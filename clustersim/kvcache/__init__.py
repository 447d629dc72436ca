"""KV-cache memory: block allocators, the prefix cache and the ledger (pure, no simpy).

:data:`ALLOCATORS` maps the scenario's ``kv.allocator`` to the KV manager that implements it.
"""

from clustersim.kvcache.contiguous import ContiguousKV
from clustersim.kvcache.manager import KVManager, KVSpec
from clustersim.kvcache.paged import BlockPool, KVAccountingError
from clustersim.registry import Registry

ALLOCATORS: Registry[type[KVManager]] = Registry("KV allocator", [("paged", KVManager), ("contiguous", ContiguousKV)])

__all__ = ["ALLOCATORS", "BlockPool", "ContiguousKV", "KVAccountingError", "KVManager", "KVSpec"]
