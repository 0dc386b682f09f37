"""int8 quantisation."""
