import type { Client, Machine } from "../../api/generated";
import { useCall } from "../../lib/call";
import { isControlPlane } from "../../lib/node";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Badge } from "../../components/ui/badge";
import { Table, TBody, TD, TH, THead, TR } from "../../components/ui/table";
import { ErrorAlert } from "../../components/errors";
import { Loading } from "../../components/loading";

/** EtcdMembers is the etcd members as a control plane node sees them; a worker runs none and is not asked. */
export function EtcdMembers({ m, client }: { m: Machine; client: Client }) {
  const cp = isControlPlane(m);
  const etcd = useCall(`etcd-${m.name}-${cp}`, () => (cp ? client.getNodeEtcdMembers({ name: m.name ?? "" }) : Promise.resolve(null)));
  return (
    <Card>
      <CardHeader>
        <CardTitle>etcd</CardTitle>
      </CardHeader>
      <CardContent>
        {!cp && <p class="text-sm text-muted-foreground">A worker runs no etcd member.</p>}
        <ErrorAlert error={etcd.error} what="Reading the etcd members" />
        <Loading when={etcd.loading} />
        {etcd.data && (
          <Table label="etcd members">
            <THead>
              <tr>
                <TH>Member</TH>
                <TH>Hostname</TH>
                <TH>Peer URLs</TH>
              </tr>
            </THead>
            <TBody>
              {(etcd.data.members ?? []).map((e) => (
                <TR key={e.id}>
                  <TD label="Member" class="font-mono text-xs">
                    {e.id} {e.learner && <Badge tone="warn">learner</Badge>}
                  </TD>
                  <TD label="Hostname">{e.hostname}</TD>
                  <TD label="Peer URLs" class="font-mono text-xs break-all">{e.peerUrls?.join(", ")}</TD>
                </TR>
              ))}
            </TBody>
          </Table>
        )}
      </CardContent>
    </Card>
  );
}
