"""Core: layouts, the instance state machine, the supervisor and the OS seams. Never imports Textual."""
