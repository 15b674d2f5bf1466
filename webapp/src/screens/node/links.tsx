import type { Client, Machine } from "../../api/generated";
import { useCall } from "../../lib/call";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Table, TBody, TD, TH, THead, TR } from "../../components/ui/table";
import { ErrorAlert } from "../../components/errors";
import { Loading } from "../../components/loading";

/** Links is the node's network links as Talos reports them now, or as discovery found them until that read answers. */
export function Links({ m, client }: { m: Machine; client: Client }) {
  const links = useCall(`links-${m.name}`, () => client.getNodeLinks({ name: m.name ?? "" }));
  return (
    <Card>
      <CardHeader>
        <CardTitle>Network links</CardTitle>
      </CardHeader>
      <CardContent>
        <ErrorAlert error={links.error} what="Reading the node's links" />
        <Loading when={links.loading} />
        <Table label="Node links">
          <THead>
            <tr>
              <TH>Name</TH>
              <TH>MAC</TH>
              <TH>State</TH>
              <TH>Addresses</TH>
            </tr>
          </THead>
          <TBody>
            {links.data?.links
              ? links.data.links.map((l) => (
                  <TR key={l.name}>
                    <TD label="Name">
                      {l.name} {l.aliases?.length ? <span class="text-xs text-muted-foreground">({l.aliases.join(", ")})</span> : null}
                    </TD>
                    <TD label="MAC" class="font-mono text-xs">{l.permanentAddr || l.hardwareAddr}</TD>
                    <TD label="State">{l.operationalState}</TD>
                    <TD label="Addresses" class="font-mono text-xs">{l.addresses?.join(", ")}</TD>
                  </TR>
                ))
              : (m.hardware?.links ?? []).map((l) => (
                  <TR key={l.name}>
                    <TD label="Name">{l.name}</TD>
                    <TD label="MAC" class="font-mono text-xs">{l.permanentMac}</TD>
                    <TD label="State">—</TD>
                    <TD label="Addresses" class="font-mono text-xs">{l.addresses?.join(", ")}</TD>
                  </TR>
                ))}
          </TBody>
        </Table>
      </CardContent>
    </Card>
  );
}
