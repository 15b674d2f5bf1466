import type { GetClusterHealthResponse } from "../api/generated";
import { Badge } from "../components/ui/badge";
import { Card, CardContent, CardHeader, CardTitle } from "../components/ui/card";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import { ErrorAlert } from "../components/errors";
import { etcdSummary, apiServersSummary, skewed, certificatesSummary } from "../lib/health";
import { timeAgo } from "../lib/status";

/** HealthTiles are the control plane's figures: etcd quorum, kube-apiservers ready, version skew and certificates. */
export function HealthTiles({ health }: { health: GetClusterHealthResponse | null }) {
  const etcd = etcdSummary(health);
  const apis = apiServersSummary(health);
  const skew = skewed(health);
  const certs = certificatesSummary(health, Date.now());
  return (
    <div class="grid grid-cols-1 gap-4 sm:grid-cols-2 lg:grid-cols-4" data-testid="health-tiles">
      <HealthTile title="etcd" value={etcd.value} tone={etcd.tone} detail={etcd.detail} testid="tile-etcd" />
      <HealthTile title="API servers ready" value={apis.value} tone={apis.tone} detail={apis.detail} testid="tile-apiservers" />
      <HealthTile title="Version skew" value={skew.value} tone={skew.tone} detail={skew.detail} testid="tile-skew" />
      <HealthTile title="Certificates" value={certs.value} tone={certs.tone} detail={certs.detail} testid="tile-certificates" />
    </div>
  );
}

function HealthTile({ title, value, tone, detail, testid }: { title: string; value: string; tone: "ok" | "warn" | "bad" | "neutral"; detail: string; testid: string }) {
  return (
    <Card class="h-full">
      <CardHeader>
        <h2 class="text-sm font-medium text-muted-foreground">{title}</h2>
        <p class="flex flex-wrap items-center gap-2 text-2xl font-semibold leading-tight" data-testid={testid}>
          <span>{value}</span>
          {tone !== "neutral" && <Badge tone={tone}>{tone === "ok" ? "healthy" : tone === "warn" ? "check" : "problem"}</Badge>}
        </p>
      </CardHeader>
      <CardContent class="text-sm text-muted-foreground break-words">{detail}</CardContent>
    </Card>
  );
}

/** ControlPlanes is one row per control plane: its kube-apiserver and its etcd member, and the versions of every node. */
export function ControlPlanes({ health, error }: { health: GetClusterHealthResponse | null; error: unknown }) {
  return (
    <Card>
      <CardHeader>
        <CardTitle>Control plane and versions</CardTitle>
      </CardHeader>
      <CardContent>
        <ErrorAlert error={error} what="Reading the control plane's health" />
        {health && (
          <>
            <Table label="Control planes">
              <THead>
                <tr>
                  <TH>Control plane</TH>
                  <TH>kube-apiserver</TH>
                  <TH>etcd</TH>
                </tr>
              </THead>
              <TBody>
                {(health.controlPlanes ?? []).map((cp) => (
                  <TR key={cp.machine} data-cp={cp.machine}>
                    <TD label="Control plane">
                      <a href={`/nodes/${encodeURIComponent(cp.machine ?? "")}`} class="font-medium hover:underline">
                        {cp.machine}
                      </a>
                    </TD>
                    <TD label="kube-apiserver">
                      <Badge tone={cp.apiServerReady ? "ok" : "bad"}>{cp.apiServerReady ? "ready" : "not ready"}</Badge>
                      {!cp.apiServerReady && <div class="mt-1 break-all text-xs text-muted-foreground">{cp.apiServerMessage}</div>}
                    </TD>
                    <TD label="etcd">
                      <Badge tone={cp.etcdHealthy ? "ok" : "bad"}>{cp.etcdHealthy ? cp.etcdMessage || "healthy" : "not healthy"}</Badge>
                      {!cp.etcdHealthy && <div class="mt-1 break-all text-xs text-muted-foreground">{cp.etcdMessage}</div>}
                    </TD>
                  </TR>
                ))}
              </TBody>
            </Table>
            <Table label="Versions by node">
              <THead>
                <tr>
                  <TH>Node</TH>
                  <TH>Role</TH>
                  <TH>Talos</TH>
                  <TH>kubelet</TH>
                </tr>
              </THead>
              <TBody>
                {(health.nodes ?? []).map((n) => (
                  <TR key={n.machine} data-versions={n.machine}>
                    <TD label="Node">{n.machine}</TD>
                    <TD label="Role">{n.role || "—"}</TD>
                    <TD label="Talos" class="font-mono text-xs">
                      {n.talosVersion || "—"} {n.skewed && <Badge tone="warn">skew</Badge>}
                    </TD>
                    <TD label="kubelet" class="font-mono text-xs">{n.kubeletVersion || "—"}</TD>
                  </TR>
                ))}
              </TBody>
            </Table>
          </>
        )}
      </CardContent>
    </Card>
  );
}

/** RecentEvents are the latest Events of Ichor's objects (the cluster, its machines, operations), newest first. */
export function RecentEvents({ health }: { health: GetClusterHealthResponse | null }) {
  if (!health) return null;
  const events = health.events ?? [];
  return (
    <Card>
      <CardHeader>
        <CardTitle>Recent events</CardTitle>
      </CardHeader>
      <CardContent>
        {health.eventsUnavailable && <p class="text-sm text-muted-foreground">{health.eventsUnavailable}</p>}
        <ul class="divide-y text-sm" data-testid="recent-events">
          {events.map((e, i) => (
            <li key={i} class="flex flex-col gap-1 py-2">
              <div class="flex flex-wrap items-center gap-2">
                <Badge tone={e.type === "Warning" ? "warn" : "neutral"}>{e.type}</Badge>
                <span class="font-medium">{e.reason}</span>
                {e.kind === "TalosMachine" ? (
                  <a href={`/nodes/${encodeURIComponent(e.name ?? "")}`} class="text-muted-foreground hover:underline">
                    {e.name}
                  </a>
                ) : e.kind === "TalosOperation" ? (
                  <a href={`/operations/${encodeURIComponent(e.name ?? "")}`} class="text-muted-foreground hover:underline">
                    {e.name}
                  </a>
                ) : (
                  <span class="text-muted-foreground">{e.name}</span>
                )}
                {(e.count ?? 1) > 1 && <span class="text-xs text-muted-foreground">×{e.count}</span>}
                <span class="ml-auto text-xs text-muted-foreground">{timeAgo(e.lastTime)}</span>
              </div>
              <p class="break-words text-muted-foreground">{e.message}</p>
            </li>
          ))}
          {events.length === 0 && !health.eventsUnavailable && <li class="py-2 text-muted-foreground">No recent events</li>}
        </ul>
      </CardContent>
    </Card>
  );
}
