import { useState } from "preact/hooks";
import { useConsole } from "../context";
import { readyOf } from "../lib/status";
import { Card, CardContent, CardHeader, CardTitle } from "../components/ui/card";
import { Alert } from "../components/ui/alert";
import { NetworkError } from "../api/transport";
import { Button, LinkButton } from "../components/ui/button";
import { ErrorAlert } from "../components/errors";
import { current, phaseText, useOperations } from "../lib/operations";
import { describe } from "../api/errors";
import { waitsForRollout } from "../lib/rollout";
import { ConfigRolloutDialog } from "./rollout";
import { UpgradeDialog, type UpgradeKind } from "./talosupgrade";
import { VersionsCard } from "./ichorupgrade";
import * as api from "../api/v1alpha1";
import { PauseControl, PausedNotice } from "./pause";
import { ShutdownControl } from "./shutdown";
import { RotateCAControl, RotateKeysControl } from "./carotation";
import { RecoveryNotice } from "./recovery";
import { pausedSince } from "../lib/pause";
import { useAttention } from "../lib/attention";
import { useHealth } from "../lib/health";
import { AttentionList } from "./attention";
import { ControlPlanes, HealthTiles, RecentEvents } from "./health";
import { RecentOperations } from "./recentops";
import { backupSummary, useBackups } from "./backups";
import { TalosconfigDownload } from "./node/downloads";

/** Tile is one figure of the overview: its label is the heading, the figure the text under it. */
function Tile({ title, value, detail, href, testid }: { title: string; value: string | number; detail?: string; href?: string; testid: string }) {
  const body = (
    <Card class="h-full">
      <CardHeader>
        <h2 class="text-sm font-medium text-muted-foreground">{title}</h2>
        <p class="text-3xl font-semibold leading-tight break-words" data-testid={testid}>
          {value}
        </p>
      </CardHeader>
      {detail && <CardContent class="text-sm text-muted-foreground break-words">{detail}</CardContent>}
    </Card>
  );
  return href ? (
    <a href={href} class="block rounded-lg">
      {body}
    </a>
  ) : (
    body
  );
}

export function Overview() {
  const { client, cluster, clusterError, refreshCluster, machines, synced, canWrite, download } = useConsole();
  const { ops, error: opsError } = useOperations(client);
  const running = current(ops);
  const approved = machines.filter((m) => m.approval?.state === api.ApprovalApproved);
  const ready = approved.filter((m) => readyOf(m) === "True");
  const pending = machines.filter((m) => m.approval?.state === api.ApprovalPending);
  const cps = approved.filter((m) => m.role === api.RoleControlPlane).length;
  // The list is the backend's (contracts/pkg/attention, as `ichor cluster get` prints it): read again when anything changes.
  const version = `${cluster?.resourceVersion ?? ""}/${machines.map((m) => m.resourceVersion).join(",")}/${ops?.map((o) => `${o.name}:${o.phase}:${o.paused}`).join(",") ?? ""}`;
  const { items: attention, incomplete, error: attentionError, reload } = useAttention(client, version);
  const { health, error: healthError } = useHealth(client);
  const { data: backups, error: backupsError } = useBackups(client, 30000);
  const backupTile = backupSummary(backups?.backups);
  const [applyOpen, setApplyOpen] = useState(false);
  const [upgradeOpen, setUpgradeOpen] = useState<UpgradeKind | null>(null);
  const [actionError, setActionError] = useState<unknown>(null);
  const act = (what: Promise<unknown>) =>
    what.then(
      () => {
        setActionError(null);
        refreshCluster();
        reload();
      },
      setActionError,
    );
  const offerApply = canWrite && !!cluster?.name && waitsForRollout(machines);
  return (
    <>
      <div class="flex flex-wrap items-center justify-between gap-2">
        <h1 class="text-xl font-semibold">Overview</h1>
        <div class="flex flex-wrap items-start gap-2">
          <PauseControl />
          {canWrite && !!cluster?.name && (
            <>
              <Button variant="outline" onClick={() => setUpgradeOpen("talos")} data-testid="talos-upgrade-open">
                Upgrade Talos…
              </Button>
              <Button variant="outline" onClick={() => setUpgradeOpen("kubernetes")} data-testid="kubernetes-upgrade-open">
                Upgrade Kubernetes…
              </Button>
            </>
          )}
          {canWrite && (
            <LinkButton href="/add-node" variant="default">
              Add node
            </LinkButton>
          )}
          <RotateCAControl />
          <RotateKeysControl />
          <ShutdownControl />
        </div>
      </div>
      {cluster && <PausedNotice cluster={cluster} />}
      {cluster && <RecoveryNotice cluster={cluster} />}
      {/* ichor-ui not answering is told once, by the shell, with the time of the data. */}
      {!(clusterError instanceof NetworkError) && <ErrorAlert error={clusterError} what="Reading the cluster" />}
      {cluster && cluster.ready !== "True" && cluster.readyMessage && (
        <Alert tone={cluster.ready === "False" ? "error" : "warn"} title={cluster.ready === "False" ? "The cluster is not ready" : "The cluster's health is not known yet"}>
          <span data-testid="ready-message">{cluster.readyMessage}</span>
        </Alert>
      )}
      <div class="grid grid-cols-1 gap-4 sm:grid-cols-2 lg:grid-cols-4">
        <Tile title="Nodes ready" testid="tile-nodes" value={synced ? `${ready.length} / ${approved.length}` : "…"} detail={`${cps} control plane${cps === 1 ? "" : "s"}, ${approved.length - cps} worker${approved.length - cps === 1 ? "" : "s"}`} href="/nodes" />
        <Tile title="Waiting for approval" testid="tile-pending" value={synced ? pending.length : "…"} detail={pending.length ? "Review them on Add node" : "No machine waits"} href="/add-node" />
        <Tile
          title="Running operation"
          testid="tile-operation"
          value={running ? `${running.type} · ${phaseText(running)}` : ops ? "None" : opsError ? "—" : "…"}
          detail={running ? `${running.name}${running.step ? ` — ${running.step}` : ""}` : opsError ? describe(opsError) : "No operation in progress"}
          href={running ? `/operations/${encodeURIComponent(running.name ?? "")}` : "/operations"}
        />
        <Tile
          title="Last etcd backup"
          testid="tile-backups"
          value={backupsError && !backups ? "—" : backupTile.value}
          detail={backupsError && !backups ? describe(backupsError) : backupTile.detail}
          href="/backups"
        />
      </div>
      <VersionsCard client={client} cluster={cluster} canWrite={canWrite} />
      <Card aria-labelledby="attention-title">
        <CardHeader class="flex-row flex-wrap items-center justify-between">
          <CardTitle>
            <span id="attention-title">Needs attention</span>
          </CardTitle>
          {offerApply && (
            <Button size="sm" onClick={() => setApplyOpen(true)} data-testid="rollout-open" aria-label="Apply the configuration changes that wait for a rollout…">
              Apply…
            </Button>
          )}
        </CardHeader>
        <CardContent>
          <ErrorAlert error={attentionError} what="Reading what needs attention" />
          <ErrorAlert error={actionError} what="The action" />
          {incomplete.map((s) => (
            <p key={s} class="text-xs text-muted-foreground">
              {s}
            </p>
          ))}
          {attention === undefined ? (
            !attentionError && (
              <p class="text-sm text-muted-foreground" role="status">
                Reading…
              </p>
            )
          ) : attention.length === 0 ? (
            <p class="text-sm text-muted-foreground" data-testid="attention-empty">
              Nothing needs attention.
            </p>
          ) : (
            <AttentionList
              items={attention}
              canWrite={canWrite}
              now={Date.now()}
              on={{
                apply: () => setApplyOpen(true),
                resumeOperation: (name) => act(client.resumeOperation({ name, body: {} })),
                resumeCluster: () => act(client.resumeCluster({ body: {} })),
              }}
            />
          )}
        </CardContent>
      </Card>
      {upgradeOpen && <UpgradeDialog client={client} cluster={cluster?.name ?? ""} open={true} initial={upgradeOpen} onClose={() => setUpgradeOpen(null)} />}
      <HealthTiles health={health} />
      <ControlPlanes health={health} error={healthError} />
      <RecentOperations ops={ops} />
      <RecentEvents health={health} />
      {canWrite && download && <TalosconfigDownload download={download} />}
      {(offerApply || applyOpen) && <ConfigRolloutDialog client={client} cluster={cluster?.name ?? ""} open={applyOpen} onClose={() => setApplyOpen(false)} />}
      {cluster && (
        <Card>
          <details>
            <summary class="cursor-pointer p-4 text-sm font-semibold">Cluster details</summary>
            <dl class="grid grid-cols-1 gap-x-6 gap-y-2 p-4 pt-0 text-sm sm:grid-cols-2">
              <Detail k="Name" v={cluster.name} />
              <Detail k="Namespace" v={cluster.namespace} />
              <Detail k="Endpoint" v={cluster.endpoint} />
              <Detail k="Control planes declared" v={String(cluster.controlPlaneCount ?? 0)} />
              <Detail k="Ready" v={`${cluster.ready ?? "Unknown"}${cluster.readyMessage ? ` — ${cluster.readyMessage}` : ""}`} />
              <Detail k="Version contract" v={cluster.versionContract} />
              <Detail k="CNI" v={cluster.cni} />
              <Detail k="Automatic patches" v={cluster.autoPatch ? "on — newer patches of the running minors, written as ichor-auto-patch" : "off"} />
              <Detail k="Paused" v={cluster.paused ? `yes — ${pausedSince(cluster)}` : "no"} />
            </dl>
          </details>
        </Card>
      )}
    </>
  );
}

export function Detail({ k, v, mono }: { k: string; v?: string; mono?: boolean }) {
  return (
    <div class="flex min-w-0 flex-col">
      <dt class="text-xs text-muted-foreground">{k}</dt>
      <dd class={mono ? "break-all font-mono text-xs" : "break-words"}>{v || "—"}</dd>
    </div>
  );
}
