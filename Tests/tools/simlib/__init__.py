"""What the protocol simulators in Tests/tools share, so that each simulator file holds
only its protocol's rules: the HTTP/2-over-TLS server (APNs, FCM), the HTTPS server
(EWS, Graph), the control API the tests configure them through, certificates, failure
injection, the process lifecycle (ready file, signals) and the self-tests' support.

The simulators are started as scripts (`python3 Tests/tools/x_simulator.py`), which puts
Tests/tools on sys.path whatever the working directory, so `import simlib` needs no setup.
"""
