"""loom.torch: PyTorch's API over loom (placeholder on the vision branch; the loom.torch branch replaces it)."""
