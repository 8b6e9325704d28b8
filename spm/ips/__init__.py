"""Intrusion prevention: Snort 3 rules run by the built-in engine, or by Snort itself."""
