import { useConsole } from "../context";
import { StateBadge, StateDetail } from "../components/state";
import { Card, CardContent } from "../components/ui/card";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import { LinkButton } from "../components/ui/button";
import { ErrorAlert } from "../components/errors";
import * as api from "../api/v1alpha1";

export function Nodes() {
  const { machines, synced, watchError, canWrite } = useConsole();
  return (
    <>
      <div class="flex flex-wrap items-center justify-between gap-2">
        <h1 class="text-xl font-semibold">Nodes</h1>
        {canWrite && (
          <LinkButton href="/add-node" variant="default">
            Add node
          </LinkButton>
        )}
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
                  <TD label="Name">
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
                  <TD label="State" data-col="state">
                    <StateBadge m={m} />
                    <StateDetail m={m} />
                  </TD>
                  <TD label="Role" data-col="role">{m.role || "—"}</TD>
                  <TD label="Address" class="font-mono text-xs" data-col="address">{m.address || "—"}</TD>
                  <TD label="Talos" class="font-mono text-xs">{m.talosVersion || "—"}</TD>
                  <TD label="Stage" data-col="stage">{m.stage || "—"}</TD>
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
