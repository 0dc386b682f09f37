"""Execution of the DAG. Today: the NumPy reference interpreter."""
