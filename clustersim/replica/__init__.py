"""The per-replica iteration-level scheduler (a SimPy process) and its batching policies."""
