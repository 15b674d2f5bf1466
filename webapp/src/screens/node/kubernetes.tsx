import type { Client, Machine } from "../../api/generated";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Badge } from "../../components/ui/badge";
import { Detail } from "../overview";
import { EtcdMembers } from "./etcd";

/** KubernetesNode is the node's Kubernetes side: its node name, role and the labels Ichor sets. */
function KubernetesNode({ m }: { m: Machine }) {
  return (
    <Card>
      <CardHeader>
        <CardTitle>Kubernetes</CardTitle>
      </CardHeader>
      <CardContent>
        <dl class="grid grid-cols-1 gap-3 text-sm sm:grid-cols-2">
          <Detail k="Node name" v={m.nodeName} />
          <Detail k="Role" v={m.role} />
        </dl>
        <h3 class="mt-3 text-sm font-medium">Labels Ichor sets</h3>
        <ul class="mt-1 flex flex-wrap gap-1">
          {Object.entries(m.labels ?? {}).map(([k, v]) => (
            <li key={k}>
              <Badge>
                {k}={v}
              </Badge>
            </li>
          ))}
          {Object.keys(m.labels ?? {}).length === 0 && <li class="text-sm text-muted-foreground">none</li>}
        </ul>
      </CardContent>
    </Card>
  );
}

/** Kubernetes is the node page's Kubernetes and etcd tab. */
export function Kubernetes({ m, client }: { m: Machine; client: Client }) {
  return (
    <div class="grid grid-cols-1 gap-4 lg:grid-cols-2">
      <KubernetesNode m={m} />
      <EtcdMembers m={m} client={client} />
    </div>
  );
}
