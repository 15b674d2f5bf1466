import { useEffect, useState } from "preact/hooks";
import type { Client, Machine, PreviewNodeOperationResponse } from "../../api/generated";
import * as api from "../../api/v1alpha1";
import { Alert } from "../../components/ui/alert";
import { Button } from "../../components/ui/button";
import { Dialog } from "../../components/ui/dialog";
import { Field, Input } from "../../components/ui/input";
import { ErrorAlert } from "../../components/errors";
import { Loading } from "../../components/loading";
import { RefusalList } from "../../components/refusals";
import { canStartNodeOperation, nodeActionOf, nodeActions, wipeModes } from "../../lib/nodeops";
import { navigate } from "../../lib/router";

/** NodeActionButtons are the node header's Reboot…, Shut down… and Reset…; the destructive ones are red. */
export function NodeActionButtons({ onAction }: { onAction: (action: string) => void }) {
  return (
    <>
      {nodeActions.map((a) => (
        <Button key={a.action} variant={a.destructive ? "destructive" : "outline"} onClick={() => onAction(a.action)} data-testid={`node-action-${a.action}`}>
          {a.label}
        </Button>
      ))}
    </>
  );
}

/** usePreview asks the backend for the action's plan while the dialog is open, again when the wipe mode changes. */
function usePreview(client: Client, machine: string, action: string, wipeMode: string, open: boolean) {
  const [state, setState] = useState<{ preview: PreviewNodeOperationResponse | null; error: unknown; loading: boolean }>({ preview: null, error: null, loading: false });
  useEffect(() => {
    if (!open || !action) {
      setState({ preview: null, error: null, loading: false });
      return;
    }
    let stop = false;
    setState((s) => ({ ...s, error: null, loading: true }));
    client.previewNodeOperation({ machine, action, wipeMode: action === api.NodeActionReset ? wipeMode : undefined }).then(
      (preview) => !stop && setState({ preview, error: null, loading: false }),
      (error) => !stop && setState({ preview: null, error, loading: false }),
    );
    return () => {
      stop = true;
    };
  }, [open, client, machine, action, wipeMode]);
  return state;
}

/**
 * NodeActionDialog starts a node operation (reboot, shutdown or reset of
 * one machine): the backend's plan of it (PreviewNodeOperation: the steps,
 * and what the shared checks and the user's verbs refuse), the wipe mode of
 * a reset, and for a shutdown or a reset the machine's name typed; it starts
 * it with StartNodeOperation and opens the operation's page.
 */
export function NodeActionDialog({ client, m, action, onClose }: { client: Client; m: Machine; action: string; onClose: () => void }) {
  const name = m.name ?? "";
  const open = !!action;
  const [wipeMode, setWipeMode] = useState("state-ephemeral");
  const [typed, setTyped] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const { preview, error: previewError, loading } = usePreview(client, name, action, wipeMode, open);
  const a = nodeActionOf(action);
  const ready = !loading && canStartNodeOperation(preview, { action, wipeMode }, typed, name);

  function close() {
    setTyped("");
    setWipeMode("state-ephemeral");
    setError(null);
    onClose();
  }

  async function submit(e: Event) {
    e.preventDefault();
    if (!ready) return;
    setBusy(true);
    setError(null);
    try {
      const res = await client.startNodeOperation({
        body: { machine: name, action, wipeMode: action === api.NodeActionReset ? wipeMode : undefined, confirmMachineName: preview?.confirmName ? typed.trim() : undefined },
      });
      close();
      navigate(`/operations/${encodeURIComponent(res.operation?.name ?? "")}`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  }

  return (
    <Dialog open={open} onClose={close} title={`${a?.verb ?? action} ${name}?`} description={<>A node operation under the cluster lock; the checks run again when it starts.</>}>
      <form onSubmit={submit} class="flex flex-col gap-3" data-testid="node-action-dialog" data-action={action}>
        {action === api.NodeActionReset && (
          <fieldset class="flex flex-col gap-1 text-sm">
            <legend class="mb-1 font-semibold">What the reset wipes</legend>
            {wipeModes.map((w) => (
              <label key={w.mode} class="flex items-start gap-2">
                <input type="radio" name="wipe-mode" value={w.mode} checked={wipeMode === w.mode} onChange={() => setWipeMode(w.mode)} data-testid={`wipe-${w.mode}`} />
                <span>{w.label}</span>
              </label>
            ))}
          </fieldset>
        )}
        <ErrorAlert error={previewError} what={`Planning the ${action} of ${name}`} />
        {!preview && <Loading when={loading} />}
        {preview && (
          <div class="flex flex-col gap-3 text-sm" aria-busy={loading}>
            <RefusalList refusals={preview.refusals ?? []} title={`The checks refuse this ${action} now`} testid="node-action-refusals" />
            {preview.downtime && (
              <Alert tone="warn" title="There will be downtime">
                <p data-testid="node-action-downtime">{preview.downtime}. Typing the machine's name accepts it.</p>
              </Alert>
            )}
            {(preview.warnings ?? []).length > 0 && (
              <Alert tone="warn" title="Before you go on">
                <ul class="list-disc pl-5" data-testid="node-action-warnings">
                  {(preview.warnings ?? []).map((w, i) => (
                    <li key={i}>{w}</li>
                  ))}
                </ul>
              </Alert>
            )}
            <div>
              <p class="font-semibold">Steps</p>
              <ol class="mt-1 list-decimal space-y-1 pl-5 text-muted-foreground" data-testid="node-action-steps">
                {(preview.steps ?? []).map((s, i) => (
                  <li key={i}>{s}</li>
                ))}
              </ol>
            </div>
          </div>
        )}
        {preview?.allowed && preview.confirmName && (
          <Field id="node-action-confirm" label={`Type ${name} to confirm`}>
            <Input id="node-action-confirm" value={typed} onInput={(e) => setTyped(e.currentTarget.value)} autoComplete="off" spellcheck={false} />
          </Field>
        )}
        <ErrorAlert error={error} what={`Starting the ${action} of ${name}`} />
        <div class="flex justify-end gap-2">
          <Button variant="outline" onClick={close}>
            Cancel
          </Button>
          <Button type="submit" variant={a?.destructive ? "destructive" : "default"} disabled={!ready || busy} data-testid="node-action-start">
            {busy ? "Starting…" : (a?.verb ?? action)}
          </Button>
        </div>
      </form>
    </Dialog>
  );
}
