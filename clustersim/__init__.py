"""clustersim: a discrete-event performance model of an LLM GPU serving cluster."""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__ = version("clustersim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["Result", "__version__", "load", "plan", "run", "sweep"]
_API = ("Result", "load", "plan", "run", "sweep")


def __getattr__(name: str) -> Any:
    """The Python API (:mod:`clustersim.api`), imported on first use so ``import clustersim`` stays light."""
    if name in _API:
        from clustersim import api

        return getattr(api, name)
    raise AttributeError(f"module 'clustersim' has no attribute {name!r}")
