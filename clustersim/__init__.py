"""clustersim: a discrete-event performance model of an LLM GPU serving cluster."""

from typing import Any

# the package's version (pyproject.toml reads it from here): a literal, so no command pays for
# importlib.metadata at start-up
__version__ = "0.1.0"

__all__ = ["Result", "__version__", "load", "plan", "run", "sweep"]
_API = ("Result", "load", "plan", "run", "sweep")


def __getattr__(name: str) -> Any:
    """The Python API (:mod:`clustersim.api`), imported on first use so ``import clustersim`` stays light."""
    if name in _API:
        from clustersim import api

        return getattr(api, name)
    raise AttributeError(f"module 'clustersim' has no attribute {name!r}")
