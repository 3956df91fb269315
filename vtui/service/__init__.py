"""The session supervisor: one background process per session that owns its instances (the core
`Supervisor`: state machines, restart policy, adoption), the scrape loops and the GPU sampler, bounded
histories and the layout it runs; and the clients that talk to it over HTTP on a Unix socket.

- `locations`: where a session's socket, lock, registration and log live (stdlib only).
- `client`: the stdlib client the CLI uses (fast to import: `vtui ps` pays no httpx), and the on-demand
  start of the supervisor process (detached, own session).
- `wire`: events and snapshots to JSON and back.
- `server`: the supervisor process (`python -m vtui.service --layout FILE`), HTTP served with h11.
- `remote`: `RemoteSupervisor`, the `SupervisorApi` the dashboard uses, over httpx.

Never imports Textual or vtui.ui.
"""
