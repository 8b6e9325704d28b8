"""The OpenGate topology in Mininet: hosts, LANs, NPM switches and SPM hosts, built from data."""
