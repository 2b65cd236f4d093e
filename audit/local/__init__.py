"""Throwaway local servers on loopback, for the demo and the tests (never used against real pairs)."""
