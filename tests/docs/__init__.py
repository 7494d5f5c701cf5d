"""Tests that run the code examples of the docs."""
