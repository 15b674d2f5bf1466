import { useState } from "preact/hooks";
import type { Operation } from "../api/generated";
import { useConsole } from "../context";
import { canPause, canResume, fromTo, machineTone, phaseText, phaseTone, useOperations } from "../lib/operations";
import { timeAgo } from "../lib/status";
import { Badge } from "../components/ui/badge";
import { Button } from "../components/ui/button";
import { Card, CardContent, CardHeader, CardTitle } from "../components/ui/card";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import { Alert } from "../components/ui/alert";
import { Dialog } from "../components/ui/dialog";
import { ErrorAlert } from "../components/errors";
import { Detail } from "./overview";
import * as api from "../api/v1alpha1";
import { RotationCredentialsCard } from "./carotation";

/** stageTitle names a kubernetes operation's stage for people. */
export function stageTitle(name?: string): string {
  switch (name) {
    case api.KubernetesStagePreCheck:
      return "Pre-checks (skew, pairing, nodes, etcd, removed APIs in use)";
    case api.KubernetesStagePrePull:
      return "Images pulled on every node";
    case api.KubernetesStageControlPlane:
      return "Control planes, one at a time";
    case api.KubernetesStageKubeProxy:
      return "kube-proxy";
    case api.KubernetesStageManifests:
      return "Bootstrap manifests synced";
    case api.KubernetesStageKubelet:
      return "Kubelets, control planes first";
    case "prepare":
      return "New CAs made, kept beside the old ones";
    case "accept":
      return "Every node accepts the new CAs";
    case "credentials":
      return "Credentials of the new CAs handed out";
    case "issue":
      return "The new CAs issue";
    case "root-ca":
      return "Every namespace trusts the new Kubernetes CA";
    case "drop":
      return "The old CAs dropped";
    case "restart-clients":
      return "Clients that keep the old CA restarted";
    case "finish":
      return "The old bundle removed";
    default:
      return name ?? "";
  }
}

function stageTone(phase?: string): "ok" | "warn" | "neutral" {
  switch (phase) {
    case api.StageDone:
      return "ok";
    case api.StageInProgress:
      return "warn";
    default:
      return "neutral";
  }
}

export function PhaseBadge({ op }: { op: Operation }) {
  return (
    <Badge tone={phaseTone(op)}>{phaseText(op)}</Badge>
  );
}

/** overrideEffect says what a resume with override goes past, before a person confirms it. */
export function overrideEffect(op: Operation): string {
  const what =
    op.type === "kubernetes"
      ? "upgrades Kubernetes although APIs the target removes are in use"
      : "drains the node although the pods it evicts do not fit on the other nodes: they stay Pending until it is back";
  return `The failed step runs again and ${what}. The override needs the override verb on the cluster and is recorded on the cluster.`;
}

/** PauseResume are the operation's buttons; the caller hides them for viewers. */
export function PauseResume({ op, onDone }: { op: Operation; onDone: () => void }) {
  const { client } = useConsole();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [ask, setAsk] = useState(false);
  const name = op.name ?? "";
  const act = async (what: "pause" | "resume" | "override") => {
    setBusy(true);
    setError(null);
    try {
      if (what === "pause") await client.pauseOperation({ name, body: {} });
      else await client.resumeOperation({ name, body: what === "override" ? { override: true } : {} });
      onDone();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="flex flex-col gap-2">
      <div class="flex gap-2">
        {canPause(op) && (
          <Button size="sm" variant="outline" disabled={busy} onClick={() => act("pause")} data-testid={`pause-${name}`} aria-label={`Pause operation ${name}`}>
            Pause
          </Button>
        )}
        {canResume(op) && (
          <Button size="sm" disabled={busy} onClick={() => act("resume")} data-testid={`resume-${name}`} aria-label={`${op.failureReason ? "Retry the failed step of" : "Resume"} operation ${name}`}>
            {op.failureReason ? "Retry step" : "Resume"}
          </Button>
        )}
        {canResume(op) && op.overridable && (
          <Button size="sm" variant="outline" disabled={busy} onClick={() => setAsk(true)} data-testid={`override-open-${name}`} aria-label={`Retry the failed step of operation ${name} with override…`}>
            Retry with override…
          </Button>
        )}
        {ask && (
          <Dialog open onClose={() => setAsk(false)} title={`Retry operation ${name} with override?`} description={overrideEffect(op)}>
            <div class="flex justify-end gap-2">
              <Button variant="outline" onClick={() => setAsk(false)}>
                Cancel
              </Button>
              <Button
                disabled={busy}
                data-testid={`override-${name}`}
                onClick={() => {
                  setAsk(false);
                  void act("override");
                }}
              >
                Retry with override
              </Button>
            </div>
          </Dialog>
        )}
      </div>
      <ErrorAlert error={error} what={`Changing operation ${name}`} />
    </div>
  );
}

export function Operations() {
  const { client, canWrite } = useConsole();
  const { ops, error, reload } = useOperations(client);
  return (
    <>
      <h1 class="text-xl font-semibold">Operations</h1>
      <ErrorAlert error={error} what="Listing the operations" />
      <Card>
        <CardContent class="p-0 pt-0">
          <Table label="Operations">
            <THead>
              <tr>
                <TH>Name</TH>
                <TH>Type</TH>
                <TH>Phase</TH>
                <TH>Step</TH>
                <TH>From → to</TH>
                <TH>Started</TH>
                {canWrite && <TH>Actions</TH>}
              </tr>
            </THead>
            <TBody>
              {(ops ?? []).map((op) => (
                <TR key={op.name} data-operation={op.name}>
                  <TD label="Name">
                    <a href={`/operations/${encodeURIComponent(op.name ?? "")}`} class="font-medium hover:underline">
                      {op.name}
                    </a>
                  </TD>
                  <TD label="Type">{op.type}</TD>
                  <TD label="Phase" data-col="phase">
                    <PhaseBadge op={op} />
                  </TD>
                  <TD label="Step" class="text-xs">
                    {op.step || "—"}
                    {op.failureReason && <div class="text-destructive-foreground break-words">Failed: {op.failureReason}</div>}
                  </TD>
                  <TD label="From → to" class="font-mono text-xs">{fromTo(op)}</TD>
                  <TD label="Started" class="text-xs">
                    {op.startedAt ? <time dateTime={op.startedAt}>{timeAgo(op.startedAt)}</time> : "not yet"}
                  </TD>
                  {canWrite && (
                    <TD label="Actions">
                      <PauseResume op={op} onDone={reload} />
                    </TD>
                  )}
                </TR>
              ))}
            </TBody>
          </Table>
          {ops && ops.length === 0 && <p class="p-4 text-sm text-muted-foreground">No operations yet. Upgrades, rotations and node actions show here.</p>}
          {!ops && !error && (
            <p class="p-4 text-sm text-muted-foreground" role="status">
              Loading operations…
            </p>
          )}
        </CardContent>
      </Card>
    </>
  );
}

export function OperationPage({ name }: { name: string }) {
  const { client, canWrite, cluster } = useConsole();
  const { ops, error, reload } = useOperations(client);
  const op = ops?.find((o) => o.name === name);
  return (
    <>
      <div class="flex flex-wrap items-center justify-between gap-2">
        <h1 class="text-xl font-semibold">
          <a href="/operations" class="text-muted-foreground hover:underline">
            Operations
          </a>{" "}
          / <span data-testid="operation-name">{name}</span>
        </h1>
        {op && canWrite && <PauseResume op={op} onDone={reload} />}
      </div>
      <ErrorAlert error={error} what="Reading the operation" />
      {ops && !op && (
        <Alert tone="warn" title="No such operation">
          This cluster has no operation {name}. <a href="/operations" class="underline">See all operations</a>.
        </Alert>
      )}
      {op?.failureReason && (
        <Alert tone="error" title="Paused on a failed step">
          {op.failureReason}
        </Alert>
      )}
      {op && (
        <>
          <Card>
            <dl class="grid grid-cols-1 gap-x-6 gap-y-2 p-4 text-sm sm:grid-cols-3">
              <Detail k="Type" v={op.type} />
              <div class="flex flex-col">
                <dt class="text-xs text-muted-foreground">Phase</dt>
                <dd>
                  <PhaseBadge op={op} />
                </dd>
              </div>
              <Detail k="Step" v={op.step} />
              <Detail k="From → to" v={fromTo(op)} mono />
              <Detail k="Started" v={op.startedAt ? `${timeAgo(op.startedAt)} (${op.startedAt})` : "not yet"} />
              <Detail k="Completed" v={op.completedAt} />
            </dl>
          </Card>
          <RotationCredentialsCard op={op} cluster={cluster?.name ?? ""} />
          {(op.removedApis ?? []).length > 0 && (
            <Alert tone="warn" title="APIs in use that the target removes">
              <ul class="list-disc pl-5" data-testid="operation-removed-apis">
                {(op.removedApis ?? []).map((a) => (
                  <li key={a.api}>
                    <span class="font-mono">{a.api}</span>: removed in {a.removedRelease}, requested on {(a.controlPlanes ?? []).join(", ")}
                  </li>
                ))}
              </ul>
            </Alert>
          )}
          {(op.stages ?? []).length > 0 && (
            <Card>
              <CardHeader>
                <CardTitle>Stages</CardTitle>
              </CardHeader>
              <CardContent>
                <ol class="flex flex-col gap-2 text-sm" data-testid="operation-stages">
                  {(op.stages ?? []).map((st) => (
                    <li key={st.name} class="flex flex-wrap items-baseline gap-2" data-stage={st.name}>
                      <Badge tone={stageTone(st.phase)}>{st.phase}</Badge>
                      <span class="font-medium">{stageTitle(st.name)}</span>
                      {st.message && <span class="text-xs text-muted-foreground">{st.message}</span>}
                    </li>
                  ))}
                </ol>
              </CardContent>
            </Card>
          )}
          <Card>
            <CardHeader>
              <CardTitle>Machines</CardTitle>
            </CardHeader>
            <CardContent class="p-0 pt-0">
              <Table label="Machines of the operation">
                <THead>
                  <tr>
                    <TH>Machine</TH>
                    {(op.stages ?? []).length > 0 && <TH>Stage</TH>}
                    <TH>State</TH>
                    <TH>Detail</TH>
                  </tr>
                </THead>
                <TBody>
                  {(op.machines ?? []).map((m) => (
                    <TR key={m.name}>
                      <TD label="Machine">
                        <a href={`/nodes/${encodeURIComponent(m.name ?? "")}`} class="hover:underline">
                          {m.name}
                        </a>
                      </TD>
                      {(op.stages ?? []).length > 0 && <TD label="Stage">{m.stage ? stageTitle(m.stage) : "—"}</TD>}
                      <TD label="State">
                        <Badge tone={machineTone(m.state)}>{m.state}</Badge>
                      </TD>
                      <TD label="Detail" class="text-xs">{m.message || "—"}</TD>
                    </TR>
                  ))}
                </TBody>
              </Table>
              {!op.machines?.length && <p class="p-4 text-sm text-muted-foreground">No machine has started yet.</p>}
            </CardContent>
          </Card>
        </>
      )}
    </>
  );
}
