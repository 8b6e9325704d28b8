"""OpenGate: pieces shared by the controller, the SPM daemon, the software switch and tests."""
