"""Anti-virus inspection through ClamAV's clamd (INSTREAM)."""
