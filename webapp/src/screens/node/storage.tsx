import type { Client, Machine } from "../../api/generated";
import { DiskRoles, Disks } from "./disks";
import { Links } from "./links";

/** Storage is the node page's storage and network tab: the disk roles, the disks and the links. */
export function Storage({ m, client }: { m: Machine; client: Client }) {
  return (
    <div class="flex flex-col gap-4">
      <DiskRoles m={m} />
      <Disks m={m} client={client} />
      <Links m={m} client={client} />
    </div>
  );
}
