import type { Client, Machine } from "../../api/generated";
import { useCall } from "../../lib/call";
import { Services } from "./services";
import { Logs } from "./logs";

/** Talos is the node page's Talos tab: the node's Talos services. */
export function Talos({ m, client }: { m: Machine; client: Client }) {
  const svc = useCall(`svc-${m.name}`, () => client.getNodeServices({ name: m.name ?? "" }));
  return <Services svc={svc} />;
}

/** LogsTab is the node page's Logs tab: the log of one of the node's Talos services, the list of services read from the node. */
export function LogsTab({ m, client }: { m: Machine; client: Client }) {
  const svc = useCall(`svc-${m.name}`, () => client.getNodeServices({ name: m.name ?? "" }));
  const ids = (svc.data?.services ?? []).map((s) => s.id ?? "").filter(Boolean);
  return <Logs m={m} client={client} services={ids} />;
}
