"""OpenGate SPM: the service processing module, an inline inspection daemon on a Linux host.

The NPM steers flows to it with a next-hop tag in the source MAC; it queues them through NFQUEUE,
dispatches each flow to one worker process (IPS, AV), and sends accepted packets back to the tag.
"""
