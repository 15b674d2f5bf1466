import type { Machine } from "../../api/generated";
import { timeAgo } from "../../lib/status";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Detail } from "../overview";
import { Conditions } from "./conditions";

/** MachineDetails is what Ichor knows of the machine: role, stage, address, versions, approval and identity. */
function MachineDetails({ m }: { m: Machine }) {
  return (
    <Card>
      <CardHeader>
        <CardTitle>Machine</CardTitle>
      </CardHeader>
      <CardContent>
        <dl class="grid grid-cols-1 gap-3 text-sm sm:grid-cols-2">
          <Detail k="Role" v={m.role} />
          <Detail k="Stage" v={m.stage} />
          <Detail k="Address" v={m.address} mono />
          <Detail k="Hostname" v={m.hostname || (m.nodeName ? `${m.nodeName} (its Kubernetes node name; no hostname reported)` : undefined)} />
          <Detail k="Talos version" v={m.talosVersion} />
          <Detail k="Installed" v={m.installed ? "yes" : "no"} />
          <Detail k="Approved by" v={m.approval?.decidedBy ? `${m.approval.decidedBy}, ${timeAgo(m.approval.decidedAt)}` : undefined} />
          <Detail k="Created" v={timeAgo(m.createdAt)} />
          <Detail k="UUID" v={m.identity?.uuid} mono />
          <Detail k="Serial" v={m.identity?.serial} mono />
          <Detail k="MACs" v={m.identity?.macAddresses?.join(", ")} mono />
          <Detail k="Maintenance certificate" v={m.maintenanceFingerprint} mono />
        </dl>
      </CardContent>
    </Card>
  );
}

/** Summary is the node page's first tab: the machine's details and its conditions. */
export function Summary({ m }: { m: Machine }) {
  return (
    <div class="grid grid-cols-1 gap-4 lg:grid-cols-2">
      <MachineDetails m={m} />
      <Conditions m={m} />
    </div>
  );
}
