"""Reference (numpy) rules, one module per op family (each registers into ``NUMPY_RULES``)."""
