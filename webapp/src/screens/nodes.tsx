import { useConsole } from "../context";
import { StateBadge } from "../components/state";
import { Card, CardContent } from "../components/ui/card";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import { LinkButton } from "../components/ui/button";
import { ErrorAlert } from "../components/errors";
import * as api from "../api/v1alpha1";

export function Nodes() {
  const { machines, synced, live, watchError, canWrite } = useConsole();
  return (
    <>
      <div class="flex flex-wrap items-center justify-between gap-2">
        <h1 class="text-xl font-semibold">Nodes</h1>
        <div class="flex items-center gap-2 text-sm text-muted-foreground">
          <span>{live ? "Live" : "Reconnecting…"}</span>
          {canWrite && (
            <LinkButton href="/add-node" variant="default" size="sm">
              Add node
            </LinkButton>
          )}
        </div>
      </div>
      <ErrorAlert error={watchError} what="Watching the machines" />
      <Card>
        <CardContent class="p-0 pt-0">
          <Table label="Machines">
            <THead>
              <tr>
                <TH>Name</TH>
                <TH>State</TH>
                <TH>Role</TH>
                <TH>Address</TH>
                <TH>Talos</TH>
                <TH>Stage</TH>
              </tr>
            </THead>
            <TBody>
              {machines.map((m) => (
                <TR key={m.name} data-machine={m.name}>
                  <TD>
                    {m.approval?.state === api.ApprovalPending ? (
                      <a href="/add-node" class="font-medium hover:underline">
                        {m.name}
                      </a>
                    ) : (
                      <a href={`/nodes/${encodeURIComponent(m.name ?? "")}`} class="font-medium hover:underline">
                        {m.name}
                      </a>
                    )}
                    {m.hostname && m.hostname !== m.name && <div class="text-xs text-muted-foreground">{m.hostname}</div>}
                  </TD>
                  <TD data-col="state">
                    <StateBadge m={m} />
                  </TD>
                  <TD data-col="role">{m.role || "—"}</TD>
                  <TD class="font-mono text-xs" data-col="address">{m.address || "—"}</TD>
                  <TD class="font-mono text-xs">{m.talosVersion || "—"}</TD>
                  <TD data-col="stage">{m.stage || "—"}</TD>
                </TR>
              ))}
            </TBody>
          </Table>
          {synced && machines.length === 0 && <p class="p-4 text-sm text-muted-foreground">No machines yet. Add one by address or subnet.</p>}
          {!synced && <p class="p-4 text-sm text-muted-foreground" role="status">Loading machines…</p>}
        </CardContent>
      </Card>
    </>
  );
}
