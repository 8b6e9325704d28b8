"""The IPsec SPM: strongSwan's charon does IKEv2, the Linux kernel (XFRM) does ESP.

`charon.Charon` runs one charon per SPM host with its own strongswan.conf, VICI socket and log
(so that several run on one machine, each in its own network namespace); `control.IpsecControl`
loads tunnels (`opengate.ipsec.TunnelSpec`) over VICI, brings them up and reads their SAs and
counters; `control.diagnose` turns charon's log lines into an error a person can act on;
`service.IpsecService` ties them together for the SPM daemon.
"""
