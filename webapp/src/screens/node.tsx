import { useState } from "preact/hooks";
import { useConsole } from "../context";
import { navigate } from "../lib/router";
import { activeTab, canRemove, nodeTabs, tabHref } from "../lib/node";
import { Tabs } from "../components/ui/tabs";
import { Alert } from "../components/ui/alert";
import { NodeHeader } from "./node/header";
import { Summary } from "./node/summary";
import { Storage } from "./node/storage";
import { LogsTab, Talos } from "./node/talos";
import { Kubernetes } from "./node/kubernetes";
import { Configuration } from "./node/config";
import { RemoveDialog } from "./node/remove";
import { NodeActionDialog } from "./node/actions";
import { offersNodeActions } from "../lib/nodeops";
import { canAdmin } from "../lib/operations";
import { NodeDownloads, offersDownloads } from "./node/downloads";

/** NodePage is one machine: its header, the tab the address names, the node action and remove dialogs. */
export function NodePage({ name, tab }: { name: string; tab: string }) {
  const { machines, synced, canWrite, client, me, download } = useConsole();
  const [removing, setRemoving] = useState(false);
  const [action, setAction] = useState("");
  const m = machines.find((x) => x.name === name);
  if (!m) {
    return synced ? (
      <Alert tone="warn" title={`No machine ${name}`}>
        It may have been removed. <a href="/nodes" class="underline">Back to Nodes</a>
      </Alert>
    ) : (
      <p class="text-sm text-muted-foreground" role="status">
        Loading…
      </p>
    );
  }
  const active = activeTab(tab);
  return (
    <>
      <NodeHeader m={m} onRemove={canRemove(m, canWrite) ? () => setRemoving(true) : undefined} onAction={offersNodeActions(m, canWrite) ? setAction : undefined} />
      <Tabs label="Node sections" tabs={nodeTabs} active={active} hrefOf={(id) => tabHref(name, id)} />
      <div id="tab-panel" role="tabpanel" aria-labelledby={`tab-${active}`}>
        {active === "summary" && <Summary m={m} />}
        {active === "storage" && <Storage m={m} client={client} />}
        {active === "talos" && <Talos m={m} client={client} />}
        {active === "kubernetes" && <Kubernetes m={m} client={client} />}
        {active === "config" && <Configuration m={m} client={client} />}
        {active === "logs" && <LogsTab m={m} client={client} />}
      </div>
      {download && offersDownloads(m, canAdmin(me?.groups), download) && <NodeDownloads m={m} download={download} />}
      {action && <NodeActionDialog client={client} m={m} action={action} onClose={() => setAction("")} />}
      <RemoveDialog
        m={m}
        open={removing}
        onClose={() => {
          setRemoving(false);
        }}
      />
      {m.deleting && (
        <Alert tone="warn" title="Being removed">
          {m.removal?.phase ?? "Removal started"}. <button class="underline" onClick={() => navigate("/nodes")}>Back to Nodes</button>
        </Alert>
      )}
    </>
  );
}
