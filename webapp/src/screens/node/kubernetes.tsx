import type { Client, Condition, GetNodeKubernetesResponse, GetNodeResourcesResponse, Machine } from "../../api/generated";
import * as api from "../../api/v1alpha1";
import { Card, CardContent, CardHeader, CardTitle } from "../../components/ui/card";
import { Badge } from "../../components/ui/badge";
import { Table, TBody, TD, TH, THead, TR } from "../../components/ui/table";
import { ErrorAlert } from "../../components/errors";
import { Loading } from "../../components/loading";
import { useCall } from "../../lib/call";
import { bytes, kubeConditionTone, percent, uptime } from "../../lib/kube";
import { timeAgo } from "../../lib/status";
import { Detail } from "../overview";
import { EtcdMembers } from "./etcd";

/** KubernetesNode is the machine's Kubernetes Node: versions, conditions (problems first), taints, capacity, and the labels Ichor sets. */
export function KubernetesNode({ m, k, error, loading }: { m: Machine; k: GetNodeKubernetesResponse | null; error: unknown; loading: boolean }) {
  const conds = k?.conditions ?? [];
  const bad = conds.filter((c) => kubeConditionTone(c) !== "ok");
  const ok = conds.filter((c) => kubeConditionTone(c) === "ok");
  return (
    <Card>
      <CardHeader>
        <CardTitle>Kubernetes Node</CardTitle>
      </CardHeader>
      <CardContent>
        <dl class="grid grid-cols-1 gap-3 text-sm sm:grid-cols-2">
          <Detail k="Node name" v={m.nodeName} />
          <Detail k="Role" v={m.role} />
          <Detail k="kubelet" v={k?.kubeletVersion} />
          <Detail k="Container runtime" v={k?.containerRuntimeVersion} />
          <Detail k="Kernel" v={k?.kernelVersion} />
          <Detail k="Scheduling" v={k ? (k.unschedulable ? "cordoned" : "schedulable") : undefined} />
        </dl>
        <ErrorAlert error={error} what="Reading the Kubernetes Node" />
        <Loading when={loading} />
        {(k?.unavailable ?? []).map((u) => (
          <p key={u} class="mt-2 text-xs text-muted-foreground" data-testid="kube-unavailable">
            {u}
          </p>
        ))}
        {k && (
          <>
            <h3 class="mt-3 text-sm font-medium">Conditions</h3>
            <ul class="divide-y text-sm" data-testid="kube-conditions">
              {bad.map((c) => (
                <KubeCondition key={c.type} c={c} />
              ))}
            </ul>
            {ok.length > 0 && (
              <details class="text-sm">
                <summary class="cursor-pointer text-muted-foreground">
                  {ok.length} condition{ok.length === 1 ? "" : "s"} OK
                </summary>
                <ul class="divide-y">
                  {ok.map((c) => (
                    <KubeCondition key={c.type} c={c} />
                  ))}
                </ul>
              </details>
            )}
            <h3 class="mt-3 text-sm font-medium">Taints</h3>
            <ul class="mt-1 flex flex-wrap gap-1" data-testid="kube-taints">
              {(k.taints ?? []).map((t) => (
                <li key={`${t.key}:${t.effect}`}>
                  <Badge>
                    {t.key}
                    {t.value ? `=${t.value}` : ""}:{t.effect}
                  </Badge>
                </li>
              ))}
              {(k.taints ?? []).length === 0 && <li class="text-sm text-muted-foreground">none</li>}
            </ul>
            {(k.capacity ?? []).length > 0 && (
              <Table label="Capacity">
                <THead>
                  <tr>
                    <TH>Resource</TH>
                    <TH>Capacity</TH>
                    <TH>Allocatable</TH>
                  </tr>
                </THead>
                <TBody>
                  {(k.capacity ?? []).map((c) => (
                    <TR key={c.name}>
                      <TD label="Resource">{c.name}</TD>
                      <TD label="Capacity" class="font-mono text-xs">{c.capacity}</TD>
                      <TD label="Allocatable" class="font-mono text-xs">{c.allocatable || "—"}</TD>
                    </TR>
                  ))}
                </TBody>
              </Table>
            )}
          </>
        )}
        <h3 class="mt-3 text-sm font-medium">Labels Ichor sets</h3>
        <ul class="mt-1 flex flex-wrap gap-1">
          {Object.entries(m.labels ?? {}).map(([key, v]) => (
            <li key={key}>
              <Badge>
                {key}={v}
              </Badge>
            </li>
          ))}
          {Object.keys(m.labels ?? {}).length === 0 && <li class="text-sm text-muted-foreground">none</li>}
        </ul>
      </CardContent>
    </Card>
  );
}

function KubeCondition({ c }: { c: Condition }) {
  return (
    <li class="flex flex-col gap-1 py-2" data-condition={c.type}>
      <div class="flex flex-wrap items-center gap-2">
        <span class="font-medium">{c.type}</span>
        <Badge tone={kubeConditionTone(c)}>{c.status}</Badge>
        <span class="text-muted-foreground">{c.reason}</span>
        <span class="ml-auto text-xs text-muted-foreground">{timeAgo(c.lastTransitionTime)}</span>
      </div>
      {c.message && <p class="break-words text-muted-foreground">{c.message}</p>}
    </li>
  );
}

/** Pods are the pods bound to the Node and its recent Events. */
export function PodsAndEvents({ k }: { k: GetNodeKubernetesResponse | null }) {
  if (!k) return null;
  return (
    <Card>
      <CardHeader>
        <CardTitle>Pods ({(k.pods ?? []).length})</CardTitle>
      </CardHeader>
      <CardContent>
        <Table label="Pods on the node">
          <THead>
            <tr>
              <TH>Pod</TH>
              <TH>Phase</TH>
              <TH>Ready</TH>
              <TH>Restarts</TH>
              <TH>Age</TH>
            </tr>
          </THead>
          <TBody>
            {(k.pods ?? []).map((p) => (
              <TR key={`${p.namespace}/${p.name}`} data-pod={`${p.namespace}/${p.name}`}>
                <TD label="Pod" class="break-all">
                  <span class="text-muted-foreground">{p.namespace}/</span>
                  {p.name}
                </TD>
                <TD label="Phase">
                  <Badge tone={p.phase === "Running" || p.phase === "Succeeded" ? "ok" : p.phase === "Failed" ? "bad" : "warn"}>{p.phase || "Unknown"}</Badge>
                </TD>
                <TD label="Ready" class="font-mono text-xs">{p.ready}</TD>
                <TD label="Restarts">{p.restarts ?? 0}</TD>
                <TD label="Age">{timeAgo(p.createdAt)}</TD>
              </TR>
            ))}
          </TBody>
        </Table>
        <h3 class="mt-3 text-sm font-medium">Recent Events</h3>
        <ul class="divide-y text-sm" data-testid="kube-events">
          {(k.events ?? []).map((e, i) => (
            <li key={i} class="flex flex-col gap-1 py-2">
              <div class="flex flex-wrap items-center gap-2">
                <Badge tone={e.type === "Warning" ? "warn" : "neutral"}>{e.type}</Badge>
                <span class="font-medium">{e.reason}</span>
                {(e.count ?? 1) > 1 && <span class="text-xs text-muted-foreground">×{e.count}</span>}
                <span class="ml-auto text-xs text-muted-foreground">{timeAgo(e.lastTime)}</span>
              </div>
              <p class="break-words text-muted-foreground">{e.message}</p>
            </li>
          ))}
          {(k.events ?? []).length === 0 && <li class="py-2 text-muted-foreground">No recent Events</li>}
        </ul>
      </CardContent>
    </Card>
  );
}

/** Resources are the node's uptime, CPU, memory and filesystems, from its Talos API. */
export function Resources({ r, error, loading }: { r: GetNodeResourcesResponse | null; error: unknown; loading: boolean }) {
  return (
    <Card>
      <CardHeader>
        <CardTitle>Resources</CardTitle>
      </CardHeader>
      <CardContent>
        <ErrorAlert error={error} what="Reading the node's resource use" />
        <Loading when={loading} />
        {r && (
          <dl class="grid grid-cols-1 gap-3 text-sm sm:grid-cols-2" data-testid="node-resources">
            <Detail k="Up for" v={uptime(r.bootTime, Date.now())} />
            <Detail k="CPU" v={`${r.cpus ?? 0} CPUs, ${percent(r.cpuBusy)} busy since boot, load ${(r.load1 ?? 0).toFixed(2)}`} />
            <Detail k="Memory" v={`${bytes(Number(r.memoryTotalBytes ?? 0) - Number(r.memoryAvailableBytes ?? 0))} used of ${bytes(Number(r.memoryTotalBytes ?? 0))}`} />
            {(r.filesystems ?? []).map((f) => (
              <Detail key={f.mountPoint} k={`Disk ${f.mountPoint}`} v={`${bytes(Number(f.sizeBytes ?? 0) - Number(f.availableBytes ?? 0))} used of ${bytes(Number(f.sizeBytes ?? 0))} (${f.device})`} />
            ))}
          </dl>
        )}
      </CardContent>
    </Card>
  );
}

/** Kubernetes is the node page's Kubernetes and etcd tab. */
export function Kubernetes({ m, client }: { m: Machine; client: Client }) {
  const joined = !!m.nodeName;
  const running = m.stage === api.StageRunning;
  const k = useCall(`kube-${m.name}-${m.nodeName}`, () => (joined ? client.getNodeKubernetes({ name: m.name ?? "" }) : Promise.resolve(null)));
  const r = useCall(`res-${m.name}-${running}`, () => (running ? client.getNodeResources({ name: m.name ?? "" }) : Promise.resolve(null)));
  return (
    <div class="grid grid-cols-1 gap-4 lg:grid-cols-2">
      <KubernetesNode m={m} k={k.data} error={k.error} loading={joined && k.loading} />
      <Resources r={r.data} error={r.error} loading={running && r.loading} />
      <PodsAndEvents k={k.data} />
      <EtcdMembers m={m} client={client} />
    </div>
  );
}
