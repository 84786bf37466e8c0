"""Fast in-process tests (the default tier: ``python -m pytest``)."""
