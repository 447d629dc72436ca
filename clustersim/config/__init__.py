"""Frozen, validated configuration: scenarios and the hardware/model/engine catalogues."""
