"""Core: the model (layouts as data, the instance state machine, flag specs, records, events, snapshots,
clock) and the clients' Protocols. Imports nothing else of vtui; never Textual."""
