"""Simulations of multi-cluster agents and controllers that cannot run in the lab (labelled as such)."""
