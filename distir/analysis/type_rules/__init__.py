"""Type rules, one module per op family (each registers into ``TYPE_RULES``)."""
