import { useState } from "preact/hooks";
import type { Cluster } from "../api/generated";
import { useConsole } from "../context";
import { pausedEffects, pausedSince, scanState, whyNoScan } from "../lib/pause";
import { Alert } from "../components/ui/alert";
import { Button } from "../components/ui/button";
import { Dialog } from "../components/ui/dialog";
import { Field, Input } from "../components/ui/input";
import { ErrorAlert } from "../components/errors";

/** PausedNotice tells everyone, on the Overview, that the cluster is paused, since when and why. */
export function PausedNotice({ cluster }: { cluster: Cluster }) {
  if (!cluster.paused) return null;
  return (
    <Alert tone="warn" title={`Cluster ${cluster.name ?? ""} is paused`}>
      <p data-testid="paused-notice">
        {pausedSince(cluster)} {pausedEffects}
      </p>
      {cluster.pausedReason && (
        <p class="mt-1 break-words" data-testid="paused-reason">
          Reason: {cluster.pausedReason}
        </p>
      )}
    </Alert>
  );
}

/**
 * PauseControl is the Overview header's Pause… (a dialog that asks why) or
 * Resume. Viewers get nothing; the backend refuses them anyway.
 */
export function PauseControl() {
  const { client, cluster, refreshCluster, canWrite } = useConsole();
  const [open, setOpen] = useState(false);
  const [reason, setReason] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  if (!canWrite || !cluster?.name) return null;

  async function act(what: "pause" | "resume") {
    setBusy(true);
    setError(null);
    try {
      if (what === "pause") await client.pauseCluster({ body: { reason: reason.trim() || undefined } });
      else await client.resumeCluster({ body: {} });
      setOpen(false);
      setReason("");
      refreshCluster();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  }

  if (cluster.paused) {
    return (
      <div class="flex flex-col items-end gap-2">
        <Button variant="default" disabled={busy} onClick={() => act("resume")} data-testid="cluster-resume" aria-label={`Resume cluster ${cluster.name}`}>
          {busy ? "Resuming…" : "Resume"}
        </Button>
        <ErrorAlert error={error} what={`Resuming cluster ${cluster.name}`} />
      </div>
    );
  }
  return (
    <>
      <Button variant="outline" onClick={() => setOpen(true)} data-testid="cluster-pause-open" aria-label={`Pause cluster ${cluster.name}…`}>
        Pause…
      </Button>
      <Dialog open={open} onClose={() => setOpen(false)} title={`Pause cluster ${cluster.name}`} description={`${pausedEffects} Nothing is undone; Resume takes the work up where it stopped.`}>
        <form
          class="flex flex-col gap-3"
          onSubmit={(e) => {
            e.preventDefault();
            void act("pause");
          }}
        >
          <Field id="pause-reason" label="Reason (optional)" hint="Shown on the Overview to everyone, for example a ticket.">
            <Input id="pause-reason" value={reason} maxLength={512} onInput={(e) => setReason(e.currentTarget.value)} />
          </Field>
          <ErrorAlert error={error} what={`Pausing cluster ${cluster.name}`} />
          <div class="flex justify-end gap-2">
            <Button variant="outline" onClick={() => setOpen(false)}>
              Cancel
            </Button>
            <Button type="submit" disabled={busy} data-testid="cluster-pause">
              {busy ? "Pausing…" : "Pause cluster"}
            </Button>
          </div>
        </form>
      </Dialog>
    </>
  );
}

/** ScanNow asks discovery for a scan now (Add node); it shows the last and the next scan to everyone. */
export function ScanNow() {
  const { client, cluster, refreshCluster, canWrite } = useConsole();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const why = whyNoScan(cluster);

  async function scan() {
    setBusy(true);
    setError(null);
    try {
      await client.scanDiscovery({ body: {} });
      refreshCluster();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  }

  return (
    <div class="flex flex-col gap-2">
      <div class="flex flex-wrap items-center gap-2">
        <span class="text-sm text-muted-foreground" data-testid="scan-state">
          {scanState(cluster?.discovery)}
        </span>
        {canWrite && (
          <Button size="sm" variant="outline" disabled={busy || !!why} onClick={scan} data-testid="scan-now" aria-describedby={why ? "scan-why" : undefined}>
            {busy ? "Asking…" : "Scan now"}
          </Button>
        )}
      </div>
      {canWrite && why && (
        <p id="scan-why" class="text-xs text-muted-foreground">
          {why}
        </p>
      )}
      <ErrorAlert error={error} what="Asking for a scan" />
    </div>
  );
}
