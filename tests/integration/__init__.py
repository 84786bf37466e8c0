"""Tests that run the command line, a recipe or torchrun learners in subprocesses."""
