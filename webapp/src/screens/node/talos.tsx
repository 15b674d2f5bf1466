import type { Client, Machine } from "../../api/generated";
import { useCall } from "../../lib/call";
import { Services } from "./services";
import { Logs } from "./logs";

/** Talos is the node page's Talos tab: the services, and the log of one of them. */
export function Talos({ m, client }: { m: Machine; client: Client }) {
  const svc = useCall(`svc-${m.name}`, () => client.getNodeServices({ name: m.name ?? "" }));
  const ids = (svc.data?.services ?? []).map((s) => s.id ?? "").filter(Boolean);
  return (
    <div class="flex flex-col gap-4">
      <Services svc={svc} />
      <Logs m={m} client={client} services={ids} />
    </div>
  );
}
