import { useEffect, useState } from "preact/hooks";
import type { Client, PreviewClusterShutdownResponse } from "../api/generated";
import * as api from "../api/v1alpha1";
import { useConsole } from "../context";
import { Alert } from "../components/ui/alert";
import { Button } from "../components/ui/button";
import { Dialog } from "../components/ui/dialog";
import { Field, Input } from "../components/ui/input";
import { ErrorAlert } from "../components/errors";
import { Loading } from "../components/loading";
import { RefusalList } from "../components/refusals";
import { canStartShutdown } from "../lib/nodeops";
import { navigate } from "../lib/router";

/**
 * ShutdownDialog shuts the whole cluster down: the backend's plan
 * (PreviewClusterShutdown: the steps, the machines, a shutdown that has not
 * completed, and what the checks and the user's verbs refuse), the cluster's
 * name typed, then StartClusterShutdown; it opens the operation's page.
 */
export function ShutdownDialog({ client, cluster, open, onClose }: { client: Client; cluster: string; open: boolean; onClose: () => void }) {
  const [preview, setPreview] = useState<PreviewClusterShutdownResponse | null>(null);
  const [previewError, setPreviewError] = useState<unknown>(null);
  const [typed, setTyped] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);

  useEffect(() => {
    if (!open) return;
    let stop = false;
    setPreview(null);
    setPreviewError(null);
    client.previewClusterShutdown().then(
      (p) => !stop && setPreview(p),
      (e) => !stop && setPreviewError(e),
    );
    return () => {
      stop = true;
    };
  }, [open, client]);

  function close() {
    setTyped("");
    setError(null);
    onClose();
  }

  const name = preview?.cluster || cluster;
  const ready = canStartShutdown(preview, typed);

  async function submit(e: Event) {
    e.preventDefault();
    if (!ready) return;
    setBusy(true);
    setError(null);
    try {
      const res = await client.startClusterShutdown({ body: { confirmClusterName: typed.trim() } });
      close();
      navigate(`/operations/${encodeURIComponent(res.operation?.name ?? "")}`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <Dialog
      open={open}
      onClose={close}
      title={`Shut cluster ${name} down?`}
      description={<>Planned downtime: every machine is powered off, and stays off until someone powers it on. Ichor cannot power machines on.</>}
    >
      <form onSubmit={submit} class="flex flex-col gap-3" data-testid="shutdown-dialog">
        <ErrorAlert error={previewError} what="Planning the shutdown" />
        <Loading when={!preview && !previewError} />
        {preview?.unfinished && (
          <Alert tone="warn" title={`Shutdown ${preview.unfinished.name} has not completed (${preview.unfinished.phase || api.OperationPending})`}>
            It completes once every machine answers on a new boot:{" "}
            <a class="underline" href={`/operations/${encodeURIComponent(preview.unfinished.name ?? "")}`}>
              open {preview.unfinished.name}
            </a>
            .
          </Alert>
        )}
        {preview && (
          <div class="flex flex-col gap-3 text-sm">
            <p data-testid="shutdown-machines">
              {preview.workers ?? 0} worker{preview.workers === 1 ? "" : "s"} and {preview.controlPlanes ?? 0} control plane{preview.controlPlanes === 1 ? "" : "s"} go off.
            </p>
            <RefusalList refusals={preview.refusals ?? []} title="The checks refuse a shutdown now" testid="shutdown-refusals" />
            <div>
              <p class="font-semibold">Steps</p>
              <ol class="mt-1 list-decimal space-y-1 pl-5 text-muted-foreground" data-testid="shutdown-steps">
                {(preview.steps ?? []).map((s, i) => (
                  <li key={i}>{s}</li>
                ))}
              </ol>
            </div>
          </div>
        )}
        {preview?.allowed && !preview.unfinished && (
          <Field id="shutdown-confirm" label={`Type ${name} to confirm`}>
            <Input id="shutdown-confirm" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
          </Field>
        )}
        <ErrorAlert error={error} what={`Shutting cluster ${name} down`} />
        <div class="flex justify-end gap-2">
          <Button variant="outline" onClick={close}>
            Cancel
          </Button>
          <Button type="submit" variant="destructive" disabled={!ready || busy} data-testid="shutdown-start">
            {busy ? "Starting…" : "Shut down"}
          </Button>
        </div>
      </form>
    </Dialog>
  );
}

/** ShutdownControl is the Overview header's Shut down…, for operators and admins (the backend and the webhook check the verb). */
export function ShutdownControl() {
  const { client, cluster, canWrite } = useConsole();
  const [open, setOpen] = useState(false);
  if (!canWrite || !cluster?.name) return null;
  return (
    <>
      <Button variant="destructive" onClick={() => setOpen(true)} data-testid="shutdown-open" aria-label={`Shut down cluster ${cluster.name}…`}>
        Shut down…
      </Button>
      {open && <ShutdownDialog client={client} cluster={cluster.name} open={open} onClose={() => setOpen(false)} />}
    </>
  );
}
