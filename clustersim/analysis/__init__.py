"""Figures from clustersim run outputs (reads Parquet only)."""
