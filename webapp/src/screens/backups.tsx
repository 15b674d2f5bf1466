import { useEffect, useState } from "preact/hooks";
import type { Backup, Client, PreviewRestoreResponse, Snapshot, StartRestoreResponse } from "../api/generated";
import { useConsole } from "../context";
import { canAdmin } from "../lib/operations";
import { bytes } from "../lib/disks";
import { timeAgo } from "../lib/status";
import { Badge } from "../components/ui/badge";
import { Button, LinkButton } from "../components/ui/button";
import { Card, CardContent, CardHeader, CardTitle } from "../components/ui/card";
import { Dialog } from "../components/ui/dialog";
import { Field, Input } from "../components/ui/input";
import { Table, TBody, TD, TH, THead, TR } from "../components/ui/table";
import { Alert } from "../components/ui/alert";
import { ErrorAlert } from "../components/errors";
import * as api from "../api/v1alpha1";
import { EtcdSnapshotDownload } from "./node/downloads";

/** condition finds a condition by type. */
function condition(b: Backup, type: string) {
  return (b.conditions ?? []).find((c) => c.type === type);
}

/** backupState is the badge of a backup: failing or stale is an error, a store inside the cluster a warning. */
export function backupState(b: Backup): { tone: "ok" | "warn" | "bad"; text: string } {
  const ready = condition(b, api.ReadyCondition);
  if (condition(b, api.StaleCondition)?.status === "True") return { tone: "bad", text: "Stale" };
  if (ready?.status === "False") return { tone: "bad", text: ready.reason ?? "Failing" };
  if (!b.lastSuccess) return { tone: "warn", text: "No snapshot yet" };
  if (b.storeInCluster) return { tone: "warn", text: "Store in cluster" };
  return { tone: "ok", text: "Ready" };
}

/** backupSummary is the Overview's backups tile: the newest snapshot's age and what needs a look. */
export function backupSummary(bs: Backup[] | undefined): { value: string; detail: string } {
  if (!bs) return { value: "…", detail: "" };
  if (bs.length === 0) return { value: "None", detail: "No TalosEtcdBackup: etcd is not backed up" };
  let newest: string | undefined;
  for (const b of bs) if (b.lastSuccess && (!newest || Date.parse(b.lastSuccess) > Date.parse(newest))) newest = b.lastSuccess;
  const bad = bs.filter((b) => backupState(b).tone !== "ok").map((b) => `${b.name}: ${backupState(b).text}`);
  const count = `${bs.length} backup${bs.length === 1 ? "" : "s"}`;
  return { value: newest ? timeAgo(newest) : "No snapshot", detail: bad.length ? `${count} · ${bad.join(", ")}` : `${count}, all fine` };
}

/** useBackups lists the backups, again every everyMs. */
export function useBackups(client: Client, everyMs = 5000) {
  const [data, setData] = useState<{ backups: Backup[]; cluster: string } | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let stop = false;
    const load = () =>
      client.listBackups().then(
        (r) => {
          if (stop) return;
          setData({ backups: r.backups ?? [], cluster: r.cluster ?? "" });
          setError(null);
        },
        (e) => !stop && setError(e),
      );
    load();
    const t = setInterval(load, everyMs);
    return () => {
      stop = true;
      clearInterval(t);
    };
  }, [client, tick, everyMs]);
  return { data, error, reload: () => setTick((x) => x + 1) };
}

/**
 * Backups is the Backups page (architecture, "CLI and UI"): each
 * TalosEtcdBackup with its snapshots, Back up now (operators and admins) and
 * Restore… on a snapshot (admins: the restore needs the restore-etcd and
 * override verbs, which the backend's checks and the admission webhook
 * enforce).
 */
export function BackupsPage() {
  const { client, canWrite, me, cluster, machines, download } = useConsole();
  const { data, error, reload } = useBackups(client);
  const [restore, setRestore] = useState<{ backup: Backup; snapshot: Snapshot } | null>(null);
  const admin = canAdmin(me?.groups);
  const name = data?.cluster || cluster?.name || "";
  return (
    <>
      <h1 class="text-xl font-semibold">Backups</h1>
      <ErrorAlert error={error} what="Listing the backups" />
      {data && data.backups.length === 0 && (
        <Alert title="No backup">
          Cluster {name} has no TalosEtcdBackup: create one (kubectl apply a TalosEtcdBackup) to take encrypted etcd snapshots on a schedule.
        </Alert>
      )}
      {admin && download && <EtcdSnapshotDownload machines={machines} download={download} />}
      {(data?.backups ?? []).map((b) => (
        <BackupCard key={b.name} backup={b} canWrite={canWrite} admin={admin} onChange={reload} onRestore={(s) => setRestore({ backup: b, snapshot: s })} />
      ))}
      <RestoreDialog
        client={client}
        cluster={name}
        backup={restore?.backup ?? null}
        snapshot={restore?.snapshot ?? null}
        onClose={() => {
          setRestore(null);
          reload();
        }}
      />
    </>
  );
}

function BackupCard({ backup: b, canWrite, admin, onChange, onRestore }: { backup: Backup; canWrite: boolean; admin: boolean; onChange: () => void; onRestore: (s: Snapshot) => void }) {
  const { client } = useConsole();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const state = backupState(b);
  const ready = condition(b, api.ReadyCondition);
  const now = async () => {
    setBusy(true);
    setError(null);
    try {
      await client.backUpNow({ name: b.name ?? "", body: {} });
      onChange();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div data-backup={b.name}>
    <Card>
      <CardHeader>
        <div class="flex flex-wrap items-center justify-between gap-2">
          <CardTitle>
            {b.name} <Badge tone={state.tone}>{state.text}</Badge>
          </CardTitle>
          {canWrite && (
            <Button size="sm" disabled={busy || b.requested} onClick={now} data-testid={`backup-now-${b.name}`}>
              {b.requested ? "Snapshot requested…" : busy ? "Asking…" : "Back up now"}
            </Button>
          )}
        </div>
      </CardHeader>
      <CardContent class="flex flex-col gap-3 text-sm">
        <dl class="grid grid-cols-[max-content_1fr] gap-x-4 gap-y-1">
          <dt class="text-muted-foreground">Schedule</dt>
          <dd>
            <span class="font-mono">{b.schedule}</span> (UTC){b.suspended && ", suspended"}
          </dd>
          <dt class="text-muted-foreground">Store</dt>
          <dd class="break-all font-mono">{b.store}</dd>
          <dt class="text-muted-foreground">Last snapshot</dt>
          <dd>{b.lastSuccess ? timeAgo(b.lastSuccess) : "none yet"}</dd>
          {ready?.message && (
            <>
              <dt class="text-muted-foreground">Ready</dt>
              <dd>{ready.message}</dd>
            </>
          )}
        </dl>
        {b.lastFailure && b.lastFailureTime && (!b.lastSuccess || Date.parse(b.lastFailureTime) > Date.parse(b.lastSuccess)) && (
          <Alert tone="error" title={`The last snapshot failed ${timeAgo(b.lastFailureTime)}`}>
            {b.lastFailure}
          </Alert>
        )}
        {b.storeInCluster && (
          <Alert tone="warn" title="The store lives inside the cluster">
            {b.storeInCluster}. Snapshots are taken, but a restore into the live cluster is refused.
          </Alert>
        )}
        <ErrorAlert error={error} what={`Asking ${b.name} for a snapshot`} />
        <Table label={`Snapshots of ${b.name}`}>
          <THead>
            <tr>
              <TH>Snapshot</TH>
              <TH>Taken</TH>
              <TH>Revision</TH>
              <TH>Size</TH>
              <TH>Node</TH>
              {admin && <TH>Actions</TH>}
            </tr>
          </THead>
          <TBody>
            {(b.snapshots ?? []).map((s) => (
              <TR key={s.name}>
                <TD label="Snapshot">
                  <span class="font-mono text-xs">{s.shortName}</span>
                </TD>
                <TD label="Taken">{timeAgo(s.takenAt)}</TD>
                <TD label="Revision">{s.etcdRevision}</TD>
                <TD label="Size">{bytes(s.sizeBytes)}</TD>
                <TD label="Node">{s.node || "—"}</TD>
                {admin && (
                  <TD label="Actions">
                    <Button size="sm" variant="outline" onClick={() => onRestore(s)} data-testid={`restore-${s.shortName}`} aria-label={`Restore snapshot ${s.shortName}`}>
                      Restore…
                    </Button>
                  </TD>
                )}
              </TR>
            ))}
          </TBody>
        </Table>
        {(b.snapshots ?? []).length === 0 && <p class="text-muted-foreground">No snapshot stored yet.</p>}
      </CardContent>
    </Card>
    </div>
  );
}

/**
 * RestoreDialog restores a snapshot into the live cluster: it names the
 * Secret that holds the age identity (created by an administrator; the
 * console never sees the key), shows the steps and what refuses the restore
 * now (PreviewRestore, the checks of `ichor etcd restore`), asks for the
 * cluster's name, and writes the etcd-restore operation (StartRestore).
 */
export function RestoreDialog({ client, cluster, backup, snapshot, onClose }: { client: Client; cluster: string; backup: Backup | null; snapshot: Snapshot | null; onClose: () => void }) {
  const open = !!backup && !!snapshot;
  const [secret, setSecret] = useState("restore-identity");
  const [preview, setPreview] = useState<PreviewRestoreResponse | null>(null);
  const [previewError, setPreviewError] = useState<unknown>(null);
  const [typed, setTyped] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [started, setStarted] = useState<StartRestoreResponse | null>(null);

  useEffect(() => {
    if (!open) return;
    let stop = false;
    const t = setTimeout(() => {
      client.previewRestore({ name: backup?.name ?? "", snapshot: snapshot?.name, identitySecret: secret.trim() || undefined }).then(
        (p) => {
          if (stop) return;
          setPreview(p);
          setPreviewError(null);
        },
        (e) => !stop && setPreviewError(e),
      );
    }, 250);
    return () => {
      stop = true;
      clearTimeout(t);
    };
  }, [open, client, backup?.name, snapshot?.name, secret]);

  function close() {
    setTyped("");
    setError(null);
    setStarted(null);
    setPreview(null);
    onClose();
  }

  const name = preview?.cluster || cluster;
  const refusals = preview?.refusals ?? [];
  const ready = !!preview && refusals.length === 0 && secret.trim() !== "";

  async function submit(e: Event) {
    e.preventDefault();
    if (!ready || typed.trim() !== name) return;
    setBusy(true);
    setError(null);
    try {
      setStarted(
        await client.startRestore({
          name: backup?.name ?? "",
          body: { snapshot: snapshot?.name ?? "", identitySecret: secret.trim(), confirmClusterName: typed.trim() },
        }),
      );
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  const op = started?.operation?.name ?? "";
  return (
    <Dialog
      open={open}
      onClose={close}
      title={`Restore ${snapshot?.shortName ?? ""} into ${name}`}
      description={
        <>
          Every control plane's etcd data is wiped and etcd comes back from this snapshot (revision {snapshot?.etcdRevision}, taken {timeAgo(snapshot?.takenAt)}). Everything
          written to the cluster after it is lost. The Kubernetes API and this console go away meanwhile.
        </>
      }
    >
      {started ? (
        <div class="flex flex-col gap-3" data-testid="restore-started">
          <Alert title={`Restore ${op} started`}>The controller runs it; its progress is also kept next to the backups, so it goes on while the API is away.</Alert>
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={close}>
              Close
            </Button>
            <LinkButton variant="default" href={`/operations/${encodeURIComponent(op)}`}>
              Open {op}
            </LinkButton>
          </div>
        </div>
      ) : (
        <form onSubmit={submit} class="flex flex-col gap-3">
          <Field
            id="restore-identity"
            label="Secret holding the age identity"
            hint={`An administrator creates it: kubectl -n NAMESPACE create secret generic ${secret.trim() || "restore-identity"} --from-file=identity=KEY_FILE`}
          >
            <Input id="restore-identity" value={secret} onInput={(e) => setSecret(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
          </Field>
          <ErrorAlert error={previewError} what="Checking the restore" />
          {preview && (
            <ol class="list-decimal space-y-1 pl-5 text-sm" data-testid="restore-steps">
              {(preview.steps ?? []).map((s, i) => (
                <li key={i}>{s}</li>
              ))}
            </ol>
          )}
          {refusals.length > 0 && (
            <Alert tone="error" title="The restore is refused">
              <ul class="list-disc pl-5" data-testid="restore-refusals">
                {refusals.map((r, i) => (
                  <li key={i}>
                    {r.rule}. {r.wayOut}
                  </li>
                ))}
              </ul>
            </Alert>
          )}
          {ready && (
            <Field id="restore-confirm" label={`Type ${name} to confirm`}>
              <Input id="restore-confirm" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
            </Field>
          )}
          <ErrorAlert error={error} what="Starting the restore" />
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={close}>
              Cancel
            </Button>
            <Button type="submit" variant="destructive" disabled={!ready || typed.trim() !== name || busy} data-testid="restore-start">
              {busy ? "Starting…" : "Restore"}
            </Button>
          </div>
        </form>
      )}
    </Dialog>
  );
}
