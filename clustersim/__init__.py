"""clustersim: a discrete-event performance model of an LLM GPU serving cluster."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("clustersim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
