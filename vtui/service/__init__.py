"""The session supervisor: one background process per session that owns its instances (the core
`Supervisor`: state machines, restart policy, adoption), the scrape loops and the GPU sampler, bounded
histories and the layout it runs; and the clients that talk to it over HTTP on a Unix socket.

- `locations`: where a session's socket, lock, registration and log live (stdlib only).
- `client`: the one client of the socket (h11; the CLI, the dashboard, other hosts' forwards), the
  on-demand start of the supervisor process (detached, own session) and its handover.
- `api`: the API's version; `schema`: its one route table.
- `wire`: events and snapshots to JSON and back.
- `server`: the supervisor process (`python -m vtui.service --layout FILE`), HTTP served with h11.
- `remote`: `RemoteSupervisor`, the `SupervisorApi` the dashboard uses, over `client`.

Never imports Textual or vtui.ui.
"""
