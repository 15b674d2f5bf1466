import type { Client, Machine } from "../../api/generated";
import { useCall } from "../../lib/call";
import { bytes, stableKey, stableLabel } from "../../lib/disks";
import { networkText, selectorText } from "../../lib/node";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Badge } from "../../components/ui/badge";
import { Table, TBody, TD, TH, THead, TR } from "../../components/ui/table";
import { ErrorAlert } from "../../components/errors";
import { Loading } from "../../components/loading";

/** DiskRoles is the machine's spec for its disks (the install disk, the other disks' roles) and its primary NIC. */
export function DiskRoles({ m }: { m: Machine }) {
  const install = selectorText(m.installDisk);
  return (
    <Card>
      <CardHeader>
        <CardTitle>Disk roles</CardTitle>
      </CardHeader>
      <CardContent class="flex flex-col gap-2 text-sm">
        <div>Install disk: {install ? <span class="font-mono text-xs">{install}</span> : "the only discovered disk"}</div>
        {(m.disks ?? []).map((d, i) => (
          <div key={i}>
            <Badge>{d.role}</Badge> <span class="font-mono text-xs">{selectorText(d.disk) ?? "?"}</span> {d.volumeName && `volume ${d.volumeName}`} {d.maxSize && `max ${d.maxSize}`}
          </div>
        ))}
        {m.network?.macAddress && (
          <div>
            Primary NIC <span class="font-mono text-xs">{m.network.macAddress}</span>: {networkText(m.network)}
          </div>
        )}
      </CardContent>
    </Card>
  );
}

/** Disks is the node's disks as Talos reports them now, or as discovery found them until that read answers. */
export function Disks({ m, client }: { m: Machine; client: Client }) {
  const disks = useCall(`disks-${m.name}`, () => client.getNodeDisks({ name: m.name ?? "" }));
  return (
    <Card>
      <CardHeader>
        <CardTitle>Disks</CardTitle>
      </CardHeader>
      <CardContent>
        <ErrorAlert error={disks.error} what="Reading the node's disks" />
        <Loading when={disks.loading} />
        <Table label="Node disks">
          <THead>
            <tr>
              <TH>Device</TH>
              <TH>Size</TH>
              <TH>Model</TH>
              <TH>Transport</TH>
              <TH>Stable id</TH>
            </tr>
          </THead>
          <TBody>
            {(disks.data?.disks ?? m.hardware?.disks ?? []).map((d) => {
              const s = stableKey(d);
              return (
                <TR key={d.devicePath}>
                  <TD label="Device" class="font-mono text-xs">{d.devicePath}</TD>
                  <TD label="Size">{bytes(d.sizeBytes)}</TD>
                  <TD label="Model">{"model" in d ? (d.model as string) : "—"}</TD>
                  <TD label="Transport">{"transport" in d ? (d.transport as string) : "—"}</TD>
                  <TD label="Stable id" class="break-all">{s ? `${stableLabel[s.key]} ${s.value}` : "—"}</TD>
                </TR>
              );
            })}
          </TBody>
        </Table>
      </CardContent>
    </Card>
  );
}
