"""The supervisor layer: drives a session's instances (start order, restart policy, adoption, sleep),
the OS seams (spawn, log pump, stop, sweep, preflight), replica groups and their router, attached
servers, discovery and notifications. Imports core, layouts, telemetry and sim; never a client layer."""
